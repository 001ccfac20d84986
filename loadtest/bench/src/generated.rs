//! Made-up but plausible memories and questions of a software team, in
//! English and Korean: seven types, sixteen topics, lengths from one
//! short sentence to a 1000-character episode. Everything is a pure
//! function of `(seed, stream, index)`, so a seeded data set is
//! reproducible and parallel writers never need to agree on anything.
//!
//! `mneme-loadtest` seeds and loads tenants with them (as its `data`
//! module); `mneme-bench --haystack` buries a benchmark's corpus among them.

use serde_json::{Map, Value, json};

/// A small, fast generator whose output is fixed forever (SplitMix64),
/// unlike `rand`'s `StdRng`, whose algorithm may change between versions
/// and with it every seeded data set.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The generator of one item: `index` of `stream` under `seed`.
    pub fn for_item(seed: u64, stream: u64, index: u64) -> Self {
        let mut mixer = Self(seed ^ 0x6d6e_656d_655f_6c74);
        let a = mixer.next_u64() ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut mixer = Self(a);
        let b = mixer.next_u64() ^ index.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        Self(Self(b).next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // The modulo bias is below 2^-40 for the small n used here.
        self.next_u64() % n
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, probability: f64) -> bool {
        self.unit() < probability
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Share of memories and questions written in Korean.
pub const KOREAN_SHARE: f64 = 0.3;

/// Longest content mneme accepts (`MNEME_MAX_CONTENT_CHARS`,
/// `MNEME_MAX_EPISODE_CHARS`), with room to spare.
const MAX_CHARS: usize = 290;
const MAX_EPISODE_CHARS: usize = 980;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    English,
    Korean,
}

/// A topic: its label (`topic` argument) and how each language names it.
#[derive(Debug, Clone, Copy)]
struct Topic {
    slug: &'static str,
    en: &'static str,
    ko: &'static str,
}

const TOPICS: &[Topic] = &[
    Topic {
        slug: "deploy",
        en: "deployment",
        ko: "배포",
    },
    Topic {
        slug: "payments-api",
        en: "payments API",
        ko: "결제 API",
    },
    Topic {
        slug: "auth",
        en: "authentication",
        ko: "인증",
    },
    Topic {
        slug: "database",
        en: "database",
        ko: "데이터베이스",
    },
    Topic {
        slug: "billing",
        en: "billing",
        ko: "과금",
    },
    Topic {
        slug: "search",
        en: "search",
        ko: "검색",
    },
    Topic {
        slug: "onboarding",
        en: "onboarding",
        ko: "온보딩",
    },
    Topic {
        slug: "mobile-app",
        en: "mobile app",
        ko: "모바일 앱",
    },
    Topic {
        slug: "observability",
        en: "observability",
        ko: "관측성",
    },
    Topic {
        slug: "release-notes",
        en: "release notes",
        ko: "릴리스 노트",
    },
    Topic {
        slug: "data-pipeline",
        en: "data pipeline",
        ko: "데이터 파이프라인",
    },
    Topic {
        slug: "security",
        en: "security",
        ko: "보안",
    },
    Topic {
        slug: "support",
        en: "customer support",
        ko: "고객 지원",
    },
    Topic {
        slug: "infra-cost",
        en: "infrastructure cost",
        ko: "인프라 비용",
    },
    Topic {
        slug: "design-system",
        en: "design system",
        ko: "디자인 시스템",
    },
    Topic {
        slug: "hiring",
        en: "hiring",
        ko: "채용",
    },
];

const SERVICES: &[&str] = &[
    "payments-api",
    "auth-service",
    "search-indexer",
    "billing-worker",
    "notification-hub",
    "edge-gateway",
    "ledger",
    "image-resizer",
    "report-builder",
    "session-store",
    "checkout",
    "feature-flags",
    "export-service",
    "fraud-scorer",
];

const REGIONS: &[&str] = &[
    "eu-west-1",
    "us-east-2",
    "ap-northeast-2",
    "eu-central-1",
    "us-west-2",
    "ap-southeast-1",
];

const TECH: &[&str] = &[
    "PostgreSQL 15",
    "Redis 7",
    "Kafka",
    "gRPC",
    "OpenTelemetry",
    "Terraform",
    "Argo CD",
    "pgvector",
    "nginx",
    "Kubernetes 1.29",
    "ClickHouse",
    "S3",
    "Vault",
    "RabbitMQ",
];

const PEOPLE_EN: &[&str] = &[
    "Mina", "Jun", "Alex", "Priya", "Tomás", "Hana", "Daniel", "Aiko", "Grace", "Omar", "Lena",
    "Ravi",
];

const PEOPLE_KO: &[&str] = &[
    "민아", "준호", "서연", "지훈", "하나", "도윤", "수빈", "예린", "현우", "지민",
];

const ERRORS_EN: &[&str] = &[
    "HTTP 429 bursts",
    "connection pool exhaustion",
    "a deadlock on the orders table",
    "OOM kills",
    "TLS handshake timeouts",
    "stale cache entries",
    "duplicate webhook deliveries",
    "clock skew between nodes",
    "a full disk on the WAL volume",
    "slow DNS lookups",
];

const ERRORS_KO: &[&str] = &[
    "HTTP 429 응답 급증",
    "커넥션 풀 고갈",
    "주문 테이블 교착 상태",
    "메모리 부족으로 인한 파드 종료",
    "TLS 핸드셰이크 시간 초과",
    "오래된 캐시 항목",
    "웹훅 중복 전송",
    "노드 간 시계 오차",
    "WAL 볼륨 디스크 부족",
    "느린 DNS 조회",
];

const FIXES_EN: &[&str] = &[
    "raising the pool size to 40",
    "adding exponential backoff with jitter",
    "taking the row locks in id order",
    "setting the memory limit to 2 GiB",
    "renewing the intermediate certificate",
    "shortening the cache TTL to 60 seconds",
    "an idempotency key per delivery",
    "enabling chrony on every node",
    "moving WAL archiving to S3",
    "a local DNS cache",
];

const FIXES_KO: &[&str] = &[
    "풀 크기를 40으로 늘려서",
    "지터가 있는 지수 백오프를 추가해서",
    "행 잠금을 id 순서로 잡도록 바꿔서",
    "메모리 한도를 2GiB로 설정해서",
    "중간 인증서를 갱신해서",
    "캐시 TTL을 60초로 줄여서",
    "전송마다 멱등 키를 붙여서",
    "모든 노드에 chrony를 켜서",
    "WAL 보관을 S3로 옮겨서",
    "로컬 DNS 캐시를 두어서",
];

const REASONS_EN: &[&str] = &[
    "it halves the p95 latency",
    "the vendor contract ends in March",
    "the team already operates it",
    "it removes a single point of failure",
    "customer data has to stay in the EU",
    "it costs a third as much per month",
];

const REASONS_KO: &[&str] = &[
    "p95 지연 시간이 절반으로 줄기",
    "공급업체 계약이 3월에 끝나기",
    "팀이 이미 운영하고 있기",
    "단일 장애 지점이 사라지기",
    "고객 데이터가 EU에 있어야 하기",
    "월 비용이 3분의 1로 줄기",
];

const STYLES_EN: &[&str] = &[
    "short written summaries",
    "a live walkthrough",
    "screenshots with annotations",
    "a checklist in the pull request",
    "Korean first, English second",
];

const STYLES_KO: &[&str] = &[
    "짧은 서면 요약",
    "화면 공유로 직접 설명하는",
    "주석을 단 스크린샷",
    "풀 리퀘스트 체크리스트",
    "한국어 먼저, 영어 다음",
];

const CHANNELS: &[&str] = &["#ops", "#release", "#payments", "#incidents", "#team-sync"];

/// Memory types with their share of a realistic store.
const TYPES: &[(&str, u64)] = &[
    ("fact", 35),
    ("decision", 12),
    ("error", 15),
    ("preference", 8),
    ("procedure", 12),
    ("relation", 10),
    ("episode", 8),
];

/// One generated memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub content: String,
    pub topic: &'static str,
    pub kind: &'static str,
    pub language: Language,
    pub importance: Option<f64>,
    pub is_anchor: bool,
}

impl Memory {
    /// The arguments of `remember` (and of one `batch_remember` item).
    pub fn arguments(&self) -> Map<String, Value> {
        let mut arguments = Map::new();
        arguments.insert("content".into(), json!(self.content));
        arguments.insert("topic".into(), json!(self.topic));
        arguments.insert("type".into(), json!(self.kind));
        if let Some(importance) = self.importance {
            arguments.insert("importance".into(), json!(importance));
        }
        if self.is_anchor {
            arguments.insert("isAnchor".into(), json!(true));
        }
        arguments
    }
}

/// The slot values one memory or question is made of.
struct Slots<'a> {
    rng: &'a mut SplitMix64,
}

impl Slots<'_> {
    fn service(&mut self) -> &'static str {
        self.rng.pick(SERVICES)
    }
    fn other_service(&mut self, not: &str) -> &'static str {
        loop {
            let service = self.service();
            if service != not {
                return service;
            }
        }
    }
    fn region(&mut self) -> &'static str {
        self.rng.pick(REGIONS)
    }
    fn tech(&mut self) -> &'static str {
        self.rng.pick(TECH)
    }
    fn other_tech(&mut self, not: &str) -> &'static str {
        loop {
            let tech = self.tech();
            if tech != not {
                return tech;
            }
        }
    }
    fn version(&mut self) -> String {
        format!(
            "v{}.{}.{}",
            self.rng.between(1, 9),
            self.rng.below(40),
            self.rng.below(20)
        )
    }
    fn date(&mut self) -> String {
        format!(
            "2025-{:02}-{:02}",
            self.rng.between(1, 12),
            self.rng.between(1, 28)
        )
    }
    fn number(&mut self, low: u64, high: u64) -> u64 {
        self.rng.between(low, high)
    }
}

fn pick_type(rng: &mut SplitMix64) -> &'static str {
    let total: u64 = TYPES.iter().map(|(_, weight)| weight).sum();
    let mut roll = rng.below(total);
    for (kind, weight) in TYPES {
        if roll < *weight {
            return kind;
        }
        roll -= weight;
    }
    unreachable!("the roll is below the sum of the weights")
}

/// Memory `index` of `stream` (a tenant, or one run of the load) under
/// `seed`.
pub fn memory(seed: u64, stream: u64, index: u64) -> Memory {
    let mut rng = SplitMix64::for_item(seed, stream, index);
    let topic = rng.pick(TOPICS);
    let kind = pick_type(&mut rng);
    let language = if rng.chance(KOREAN_SHARE) {
        Language::Korean
    } else {
        Language::English
    };
    let mut content = match language {
        Language::English => english(kind, &topic, &mut rng),
        Language::Korean => korean(kind, &topic, &mut rng),
    };
    // Vary the length: some memories carry a second sentence of context.
    let limit = if kind == "episode" {
        MAX_EPISODE_CHARS
    } else {
        MAX_CHARS
    };
    if kind != "episode" && rng.chance(0.35) {
        let extra = match language {
            Language::English => english_context(&topic, &mut rng),
            Language::Korean => korean_context(&topic, &mut rng),
        };
        if content.chars().count() + 1 + extra.chars().count() <= limit {
            content.push(' ');
            content.push_str(&extra);
        }
    }
    debug_assert!(content.chars().count() <= limit, "{content}");
    let importance = rng.chance(0.3).then(|| (rng.between(3, 9) as f64) / 10.0);
    Memory {
        content,
        topic: topic.slug,
        kind,
        language,
        importance,
        is_anchor: rng.chance(0.01),
    }
}

fn english(kind: &str, topic: &Topic, rng: &mut SplitMix64) -> String {
    let variant = rng.below(2);
    let mut s = Slots { rng };
    match (kind, variant) {
        ("fact", 0) => format!(
            "{} runs {} replicas in {} behind {}; each pod handles about {} requests per second.",
            s.service(),
            s.number(2, 12),
            s.region(),
            s.tech(),
            s.number(40, 2000)
        ),
        ("fact", _) => format!(
            "{} keeps its {} data in {} with a retention of {} days.",
            s.service(),
            topic.en,
            s.tech(),
            s.number(7, 400)
        ),
        ("decision", 0) => {
            let from = s.tech();
            format!(
                "We decided to move {} from {from} to {} because {}.",
                s.service(),
                s.other_tech(from),
                s.rng.pick(REASONS_EN)
            )
        }
        ("decision", _) => format!(
            "{} decided that {} changes need two reviewers after the incident on {}.",
            s.rng.pick(PEOPLE_EN),
            topic.en,
            s.date()
        ),
        ("error", 0) => format!(
            "{} failed with {} after the {} release; fixed by {}.",
            s.service(),
            s.rng.pick(ERRORS_EN),
            s.version(),
            s.rng.pick(FIXES_EN)
        ),
        ("error", _) => format!(
            "Deploying {} to {} broke because of {}; the workaround is {}.",
            s.service(),
            s.region(),
            s.rng.pick(ERRORS_EN),
            s.rng.pick(FIXES_EN)
        ),
        ("preference", 0) => format!(
            "{} prefers {} for {} reviews.",
            s.rng.pick(PEOPLE_EN),
            s.rng.pick(STYLES_EN),
            topic.en
        ),
        ("preference", _) => format!(
            "{} wants {} status updates posted in {} every {} rather than sent by mail.",
            s.rng.pick(PEOPLE_EN),
            topic.en,
            s.rng.pick(CHANNELS),
            s.rng.pick(&["Monday", "Wednesday", "Friday"])
        ),
        ("procedure", 0) => format!(
            "To roll back {}: 1) pause the pipeline, 2) run deploy/rollback.sh {}, 3) watch the \
             error rate in {} for {} minutes.",
            s.service(),
            s.version(),
            s.region(),
            s.number(5, 60)
        ),
        ("procedure", _) => format!(
            "To rotate the {} credentials, create the new secret in {}, restart the pods one by \
             one, then revoke the old secret after {} minutes.",
            s.service(),
            s.tech(),
            s.number(5, 90)
        ),
        ("relation", 0) => {
            let owner = s.rng.pick(PEOPLE_EN);
            let mut backup = s.rng.pick(PEOPLE_EN);
            if backup == owner {
                backup = "the platform team";
            }
            format!(
                "{owner} owns {} and {backup} is the backup owner for its {}.",
                s.service(),
                topic.en
            )
        }
        ("relation", _) => {
            let service = s.service();
            format!(
                "{service} depends on {} for {} and fails closed when it is down.",
                s.other_service(service),
                topic.en
            )
        }
        _ => english_episode(topic, s.rng),
    }
}

fn english_context(topic: &Topic, rng: &mut SplitMix64) -> String {
    let mut s = Slots { rng };
    match s.rng.below(3) {
        0 => format!("Noted during the {} review on {}.", topic.en, s.date()),
        1 => format!(
            "The runbook is {}-{} in the wiki.",
            topic.slug,
            s.number(10, 999)
        ),
        _ => format!(
            "Ticket OPS-{} tracks the follow-up.",
            s.number(1000, 99_999)
        ),
    }
}

fn english_episode(topic: &Topic, rng: &mut SplitMix64) -> String {
    let mut s = Slots { rng };
    let person = s.rng.pick(PEOPLE_EN);
    let service = s.service();
    let mut sentences = vec![
        format!(
            "On {} {person} investigated {} in {service} during the {} on-call shift.",
            s.date(),
            s.rng.pick(ERRORS_EN),
            topic.en
        ),
        format!(
            "The alert fired at {:02}:{:02} UTC in {} and the error rate peaked at {}%.",
            s.number(0, 23),
            s.number(0, 59),
            s.region(),
            s.number(2, 60)
        ),
        format!(
            "A first attempt, restarting {service}, helped for {} minutes only.",
            s.number(3, 40)
        ),
        format!(
            "The lasting fix was {}, shipped in {}.",
            s.rng.pick(FIXES_EN),
            s.version()
        ),
        format!(
            "Follow-ups: add a dashboard panel in {} and review the {} runbook.",
            s.tech(),
            topic.en
        ),
    ];
    let keep = 3 + s.rng.below(3) as usize;
    sentences.truncate(keep);
    sentences.join(" ")
}

fn korean(kind: &str, topic: &Topic, rng: &mut SplitMix64) -> String {
    let variant = rng.below(2);
    let mut s = Slots { rng };
    match (kind, variant) {
        ("fact", 0) => format!(
            "{} 서비스는 {}에서 복제본 {}개로 실행되며 {} 뒤에서 파드 하나가 초당 약 {}건을 처리합니다.",
            s.service(),
            s.region(),
            s.number(2, 12),
            s.tech(),
            s.number(40, 2000)
        ),
        ("fact", _) => format!(
            "{}의 {} 데이터는 {}에 저장되고 보존 기간은 {}일입니다.",
            s.service(),
            topic.ko,
            s.tech(),
            s.number(7, 400)
        ),
        ("decision", 0) => {
            let from = s.tech();
            format!(
                "{} 때문에 {}를 {from}에서 {} 기반으로 옮기기로 결정했습니다.",
                s.rng.pick(REASONS_KO),
                s.service(),
                s.other_tech(from)
            )
        }
        ("decision", _) => format!(
            "{}님은 {} 장애 이후 {} 변경에는 리뷰어 두 명이 필요하다고 결정했습니다.",
            s.rng.pick(PEOPLE_KO),
            s.date(),
            topic.ko
        ),
        ("error", 0) => format!(
            "{} 배포 후 {}에서 {} 문제가 발생했고 {} 해결했습니다.",
            s.version(),
            s.service(),
            s.rng.pick(ERRORS_KO),
            s.rng.pick(FIXES_KO)
        ),
        ("error", _) => format!(
            "{}을 {}에 배포할 때 {} 때문에 실패했고, {} 우회했습니다.",
            s.service(),
            s.region(),
            s.rng.pick(ERRORS_KO),
            s.rng.pick(FIXES_KO)
        ),
        ("preference", 0) => format!(
            "{}님은 {} 리뷰에서 {} 방식을 선호합니다.",
            s.rng.pick(PEOPLE_KO),
            topic.ko,
            s.rng.pick(STYLES_KO)
        ),
        ("preference", _) => format!(
            "{}님은 {} 진행 상황을 메일 대신 {} 채널에 매주 {}에 올려 주기를 원합니다.",
            s.rng.pick(PEOPLE_KO),
            topic.ko,
            s.rng.pick(CHANNELS),
            s.rng.pick(&["월요일", "수요일", "금요일"])
        ),
        ("procedure", 0) => format!(
            "{} 롤백 절차: 1) 파이프라인을 멈추고 2) deploy/rollback.sh {}를 실행한 뒤 3) {}의 오류율을 {}분 동안 확인합니다.",
            s.service(),
            s.version(),
            s.region(),
            s.number(5, 60)
        ),
        ("procedure", _) => format!(
            "{} 자격 증명 교체: {}에 새 비밀을 만들고 파드를 하나씩 재시작한 뒤 {}분 후에 이전 비밀을 폐기합니다.",
            s.service(),
            s.tech(),
            s.number(5, 90)
        ),
        ("relation", 0) => {
            let owner = s.rng.pick(PEOPLE_KO);
            let mut backup = s.rng.pick(PEOPLE_KO);
            if backup == owner {
                backup = "플랫폼 팀";
            }
            format!(
                "{owner}님이 {}의 {} 업무를 담당하고 {backup}이(가) 백업 담당입니다.",
                s.service(),
                topic.ko
            )
        }
        ("relation", _) => {
            let service = s.service();
            format!(
                "{service}는 {} 기능을 위해 {}에 의존하며 그 서비스가 중단되면 요청을 거부합니다.",
                topic.ko,
                s.other_service(service)
            )
        }
        _ => korean_episode(topic, s.rng),
    }
}

fn korean_context(topic: &Topic, rng: &mut SplitMix64) -> String {
    let mut s = Slots { rng };
    match s.rng.below(3) {
        0 => format!("{} {} 리뷰에서 정리한 내용입니다.", s.date(), topic.ko),
        1 => format!(
            "위키의 {}-{} 런북을 참고하세요.",
            topic.slug,
            s.number(10, 999)
        ),
        _ => format!(
            "후속 작업은 OPS-{} 티켓에서 추적합니다.",
            s.number(1000, 99_999)
        ),
    }
}

fn korean_episode(topic: &Topic, rng: &mut SplitMix64) -> String {
    let mut s = Slots { rng };
    let person = s.rng.pick(PEOPLE_KO);
    let service = s.service();
    let mut sentences = vec![
        format!(
            "{} {} 당직 중에 {person}님이 {service}의 {} 문제를 조사했습니다.",
            s.date(),
            topic.ko,
            s.rng.pick(ERRORS_KO)
        ),
        format!(
            "알림은 UTC {:02}:{:02}에 {}에서 울렸고 오류율은 최고 {}%까지 올라갔습니다.",
            s.number(0, 23),
            s.number(0, 59),
            s.region(),
            s.number(2, 60)
        ),
        format!(
            "처음에는 {service}를 재시작했지만 {}분 동안만 효과가 있었습니다.",
            s.number(3, 40)
        ),
        format!(
            "근본적인 해결은 {} 이루어졌고 {}에 반영되었습니다.",
            s.rng.pick(FIXES_KO),
            s.version()
        ),
        format!(
            "후속 작업으로 {}에 대시보드 패널을 추가하고 {} 런북을 검토합니다.",
            s.tech(),
            topic.ko
        ),
    ];
    let keep = 3 + s.rng.below(3) as usize;
    sentences.truncate(keep);
    sentences.join(" ")
}

/// A question an agent would ask: its text and the topic it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub text: String,
    pub topic: &'static str,
    pub language: Language,
}

/// Question `index` of `stream` under `seed`.
pub fn question(seed: u64, stream: u64, index: u64) -> Question {
    let mut rng = SplitMix64::for_item(seed, stream ^ 0x7175_6573_7469_6f6e, index);
    let topic = rng.pick(TOPICS);
    let korean = rng.chance(KOREAN_SHARE);
    let variant = rng.below(6);
    let mut s = Slots { rng: &mut rng };
    let service = s.service();
    let text = if korean {
        match variant {
            0 => format!("{service} 복제본은 {}에서 몇 개인가요?", s.region()),
            1 => format!("{service}를 왜 다른 기술로 옮겼나요?"),
            2 => format!(
                "{service}의 {} 문제는 어떻게 해결했나요?",
                s.rng.pick(ERRORS_KO)
            ),
            3 => format!("{} 리뷰에서 선호하는 방식은 무엇인가요?", topic.ko),
            4 => format!("{service} 롤백 절차를 알려 주세요"),
            _ => format!("{service}의 {} 담당자는 누구인가요?", topic.ko),
        }
    } else {
        match variant {
            0 => format!("How many replicas does {service} run in {}?", s.region()),
            1 => format!("Why did we move {service} to {}?", s.tech()),
            2 => format!("How was {} in {service} fixed?", s.rng.pick(ERRORS_EN)),
            3 => format!("How does the team prefer {} reviews?", topic.en),
            4 => format!("How do I roll back {service}?"),
            _ => format!("Who owns {service} and who is the backup?"),
        }
    };
    Question {
        text,
        topic: topic.slug,
        language: if korean {
            Language::Korean
        } else {
            Language::English
        },
    }
}

/// The arguments of a `recall`: the question, sometimes narrowed to its
/// topic, as agents do when they know it.
pub fn recall_arguments(seed: u64, stream: u64, index: u64) -> Map<String, Value> {
    let question = question(seed, stream, index);
    let mut arguments = Map::new();
    arguments.insert("text".into(), json!(question.text));
    arguments.insert("limit".into(), json!(10));
    if SplitMix64::for_item(seed, stream, index).chance(0.2) {
        arguments.insert("topic".into(), json!(question.topic));
    }
    arguments
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_memories() {
        for index in 0..200 {
            assert_eq!(memory(7, 1, index), memory(7, 1, index));
            assert_eq!(question(7, 1, index), question(7, 1, index));
        }
        let differing = (0..200)
            .filter(|&i| memory(7, 1, i) != memory(8, 1, i))
            .count();
        assert!(differing > 190, "{differing} of 200 differ across seeds");
        let across_streams = (0..200)
            .filter(|&i| memory(7, 1, i) != memory(7, 2, i))
            .count();
        assert!(
            across_streams > 190,
            "{across_streams} of 200 differ across streams"
        );
    }

    #[test]
    fn the_generator_output_is_fixed_forever() {
        // A changed generator would silently change every seeded data set.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn memories_are_valid_and_varied() {
        let memories: Vec<Memory> = (0..3000).map(|i| memory(1, 0, i)).collect();
        let mut kinds: HashMap<&str, usize> = HashMap::new();
        let mut topics = HashSet::new();
        let mut korean = 0;
        let mut lengths = Vec::new();
        for memory in &memories {
            let chars = memory.content.chars().count();
            let limit = if memory.kind == "episode" { 1000 } else { 300 };
            assert!(chars <= limit, "{chars} chars: {}", memory.content);
            assert!(chars >= 30, "{}", memory.content);
            assert!(!memory.content.contains("{}"), "{}", memory.content);
            *kinds.entry(memory.kind).or_default() += 1;
            topics.insert(memory.topic);
            korean += usize::from(memory.language == Language::Korean);
            if memory.language == Language::Korean {
                assert!(
                    memory.content.chars().any(|c| ('가'..='힣').contains(&c)),
                    "{}",
                    memory.content
                );
            }
            lengths.push(chars);
        }
        assert_eq!(kinds.len(), 7, "{kinds:?}");
        assert_eq!(topics.len(), TOPICS.len());
        let share = korean as f64 / memories.len() as f64;
        assert!((0.25..0.35).contains(&share), "Korean share {share}");
        lengths.sort_unstable();
        assert!(
            lengths[0] < 90 && lengths[lengths.len() - 1] > 400,
            "{lengths:?}"
        );
        let distinct: HashSet<&str> = memories.iter().map(|m| m.content.as_str()).collect();
        assert!(distinct.len() > 2990, "{} distinct of 3000", distinct.len());
    }

    #[test]
    fn remember_arguments_carry_the_schema_names() {
        let arguments = (0..100)
            .map(|i| memory(3, 0, i))
            .find(|m| m.importance.is_some())
            .expect("some memories set an importance")
            .arguments();
        for key in ["content", "topic", "type", "importance"] {
            assert!(arguments.contains_key(key), "{arguments:?}");
        }
    }

    #[test]
    fn recall_arguments_ask_in_both_languages() {
        let questions: Vec<Question> = (0..500).map(|i| question(1, 0, i)).collect();
        let korean = questions
            .iter()
            .filter(|q| q.language == Language::Korean)
            .count();
        assert!((100..200).contains(&korean), "{korean} of 500 in Korean");
        let arguments = recall_arguments(1, 0, 0);
        assert!(arguments["text"].as_str().is_some_and(|t| !t.is_empty()));
        assert_eq!(arguments["limit"], 10);
    }
}
