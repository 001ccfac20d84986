//! A recall request, validated: limits, filters, time range, pagination
//! cursor and the search terms derived from the text.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use mneme_config::RecallConfig;
use mneme_core::cursor::{PageCursor, ResultTag, result_tag};
use mneme_core::fragment::{Affect, ResolutionStatus};
use mneme_core::principal::resolve_agent_id;
use mneme_core::text::Tokenizer;
use mneme_core::timerange::parse_range;
use mneme_core::{Error, FragmentType, Principal, Result};
use mneme_proto::v1::{RecallRequest, RecalledFragment};
use mneme_store::fragments::SearchScope;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Keywords taken from `contextText` to seed spreading activation.
const CONTEXT_KEYWORDS: usize = 8;
/// Most cases returned in case mode.
const MAX_CASES: u32 = 10;
/// Deepest position pagination reaches.
const MAX_OFFSET: usize = 450;

/// The validated request.
#[derive(Debug)]
pub(crate) struct Query {
    pub(crate) limit: usize,
    pub(crate) token_budget: usize,
    pub(crate) offset: usize,
    /// Tags of the results earlier pages of the walk returned.
    returned: Vec<ResultTag>,
    pub(crate) snapshot: DateTime<Utc>,
    digest: String,
    pub(crate) text: Option<String>,
    /// The keywords the request names (exact matches of stored keywords).
    pub(crate) keywords: Vec<String>,
    /// The distinct search terms of `text`.
    pub(crate) lexemes: Vec<String>,
    pub(crate) key_ids: Vec<Uuid>,
    pub(crate) agent_id: String,
    pub(crate) session_id: Option<String>,
    pub(crate) workspace: Option<String>,
    topic: Option<String>,
    types: Option<Vec<String>>,
    as_of: Option<DateTime<Utc>>,
    include_superseded: bool,
    time_from: Option<DateTime<Utc>>,
    time_to: Option<DateTime<Utc>>,
    case_id: Option<String>,
    phase: Option<String>,
    resolution_status: Option<String>,
    min_importance: Option<f32>,
    is_anchor: Option<bool>,
    affects: Option<Vec<String>>,
    pub(crate) exclude: Vec<Uuid>,
    pub(crate) threshold: Option<f32>,
    pub(crate) include_links: bool,
    pub(crate) link_relations: Vec<String>,
    pub(crate) include_context: bool,
    pub(crate) case_mode: bool,
    pub(crate) max_cases: usize,
    pub(crate) exclude_seen: bool,
    /// Keywords of the request's `contextText` when spreading activation is
    /// on (empty otherwise).
    pub(crate) context_keywords: Vec<String>,
    /// Names of the filters used (for search events).
    pub(crate) filter_keys: Vec<String>,
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The types a `depth` stands for.
fn depth_types(depth: &str) -> Result<Option<Vec<String>>> {
    let types: &[FragmentType] = match depth {
        "detail" => return Ok(None),
        "high-level" => &[FragmentType::Decision, FragmentType::Episode],
        "tool-level" => &[
            FragmentType::Procedure,
            FragmentType::Error,
            FragmentType::Fact,
        ],
        other => {
            return Err(Error::invalid_argument(format!(
                "unknown depth `{other}` (expected high-level, tool-level or detail)"
            )));
        }
    };
    Ok(Some(types.iter().map(|t| t.as_str().to_owned()).collect()))
}

impl Query {
    pub(crate) fn new(
        request: RecallRequest,
        principal: &Principal,
        settings: &RecallConfig,
        tokenizer: &Tokenizer,
        now: DateTime<Utc>,
    ) -> Result<Self> {
        let limit = match request.limit {
            None => settings.default_limit,
            Some(0) => return Err(Error::invalid_argument("limit must be at least 1")),
            Some(n) => (n as usize).min(settings.max_limit),
        };
        let token_budget = match request.token_budget {
            None => settings.default_token_budget,
            Some(0) => return Err(Error::invalid_argument("tokenBudget must be at least 1")),
            Some(n) => n as usize,
        };
        let mut filter_keys = Vec::new();
        let mut note = |name: &str, used: bool| {
            if used {
                filter_keys.push(name.to_owned());
            }
        };
        let types = match (
            non_empty(request.r#type.clone()),
            non_empty(request.depth.clone()),
        ) {
            (Some(t), _) => Some(vec![t.parse::<FragmentType>()?.as_str().to_owned()]),
            (None, Some(depth)) => depth_types(&depth)?,
            (None, None) => None,
        };
        note("type", types.is_some());
        let resolution_status = non_empty(request.resolution_status)
            .map(|s| s.parse::<ResolutionStatus>().map(|s| s.as_str().to_owned()))
            .transpose()?;
        let affects: Vec<String> = request
            .affect
            .iter()
            .map(|a| a.trim().parse::<Affect>().map(|a| a.as_str().to_owned()))
            .collect::<Result<_>>()?;
        let (time_from, time_to) = parse_range(
            request.time_from.as_deref(),
            request.time_to.as_deref(),
            now,
        )?;
        let as_of = match request.as_of_unix_ms {
            None => None,
            Some(ms) => Some(
                DateTime::<Utc>::from_timestamp_millis(ms)
                    .ok_or_else(|| Error::invalid_argument("asOf is out of range"))?,
            ),
        };
        if let Some(min) = request.min_importance
            && !(0.0..=1.0).contains(&min)
        {
            return Err(Error::invalid_argument(
                "minImportance must be between 0 and 1",
            ));
        }
        if let Some(threshold) = request.threshold
            && !(-1.0..=1.0).contains(&threshold)
        {
            return Err(Error::invalid_argument(
                "threshold must be between -1 and 1",
            ));
        }

        let text = non_empty(request.text);
        let mut keywords: Vec<String> = request
            .keywords
            .iter()
            .map(|k| k.trim().to_lowercase())
            .filter(|k| !k.is_empty())
            .collect();
        // Only the caller's keywords feed the keyword layer. Keywords
        // extracted from `text` would count the same words a second time
        // next to the full-text layer: on the benchmarks that double count
        // cost Recall@10 0.03 (memtomem) and recall_any@5 0.05 (LoCoMo).
        keywords.sort();
        keywords.dedup();

        let topic = non_empty(request.topic);
        let case_id = non_empty(request.case_id);
        let phase = non_empty(request.phase);
        note("topic", topic.is_some());
        note("workspace", request.workspace.is_some());
        note("asOf", as_of.is_some());
        note("includeSuperseded", request.include_superseded);
        note("timeRange", time_from.is_some() || time_to.is_some());
        note("caseId", case_id.is_some());
        note("phase", phase.is_some());
        note("resolutionStatus", resolution_status.is_some());
        note("minImportance", request.min_importance.is_some());
        note("isAnchor", request.is_anchor.is_some());
        note("affect", !affects.is_empty());

        let mut query = Self {
            limit,
            token_budget,
            offset: 0,
            returned: Vec::new(),
            snapshot: now,
            digest: String::new(),
            lexemes: text
                .as_deref()
                .map(|t| tokenizer.query_lexemes(t))
                .unwrap_or_default(),
            text,
            keywords,
            key_ids: principal.readable_key_ids(),
            agent_id: resolve_agent_id(request.agent_id.as_deref(), principal)?,
            session_id: non_empty(request.session_id).or_else(|| principal.session_id.clone()),
            workspace: non_empty(request.workspace).or_else(|| principal.workspace.clone()),
            topic,
            types,
            as_of,
            include_superseded: request.include_superseded,
            time_from,
            time_to,
            case_id,
            phase,
            resolution_status,
            min_importance: request.min_importance,
            is_anchor: request.is_anchor,
            affects: (!affects.is_empty()).then_some(affects),
            exclude: Vec::new(),
            threshold: request.threshold,
            include_links: request.include_links.unwrap_or(true),
            link_relations: if request.link_relation_types.is_empty() {
                vec!["caused_by".into(), "resolved_by".into(), "related".into()]
            } else {
                request.link_relation_types.clone()
            },
            include_context: request.include_context,
            // Only spreading activation reads them.
            context_keywords: request
                .context_text
                .as_deref()
                .filter(|_| settings.spreading_activation)
                .map(|context| tokenizer.extract_keywords(context, CONTEXT_KEYWORDS))
                .unwrap_or_default(),
            case_mode: request.case_mode,
            max_cases: request.max_cases.unwrap_or(5).clamp(1, MAX_CASES) as usize,
            exclude_seen: request.exclude_seen.unwrap_or(true),
            filter_keys,
        };
        query.digest = query.compute_digest();
        if let Some(cursor) = non_empty(request.cursor) {
            let cursor = PageCursor::decode(&cursor)?;
            if cursor.digest != query.digest {
                return Err(Error::invalid_argument(
                    "this cursor belongs to a different query; repeat the query that returned it",
                ));
            }
            query.offset = cursor.offset.min(MAX_OFFSET);
            query.returned = cursor.returned();
            query.snapshot =
                DateTime::<Utc>::from_timestamp_millis(cursor.snapshot_ms).unwrap_or(now);
        }
        Ok(query)
    }

    /// A digest of everything that decides the result set (not the page).
    fn compute_digest(&self) -> String {
        let key = format!(
            "{:?}|{:?}|{:?}|{}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.text,
            self.keywords,
            self.key_ids,
            self.agent_id,
            self.workspace,
            self.topic,
            self.types,
            self.as_of,
            self.include_superseded,
            self.time_from,
            self.time_to,
            self.case_id,
            self.phase,
            self.resolution_status,
            self.min_importance,
            self.is_anchor,
            self.affects,
        );
        hex::encode(&Sha256::digest(key.as_bytes())[..8])
    }

    /// The cursor of the page after this one, which returned `page`.
    pub(crate) fn next_cursor(&self, page: &[Uuid]) -> String {
        PageCursor::new(
            self.offset + page.len(),
            self.snapshot.timestamp_millis(),
            self.digest.clone(),
            self.returned
                .iter()
                .copied()
                .chain(page.iter().map(result_tag)),
        )
        .encode()
    }

    /// Where this page starts in `ranked` (best first): after the results
    /// earlier pages returned, wherever they rank now. Cursors of older
    /// versions carry no tags and count an offset instead.
    pub(crate) fn skip_returned(&self, ranked: &mut Vec<RecalledFragment>) -> usize {
        if self.returned.is_empty() {
            return self.offset;
        }
        let returned: HashSet<ResultTag> = self.returned.iter().copied().collect();
        ranked.retain(|fragment| {
            fragment
                .id
                .parse::<Uuid>()
                .map_or(true, |id| !returned.contains(&result_tag(&id)))
        });
        0
    }

    /// Candidates each layer must supply for this page.
    pub(crate) fn candidates(&self, per_layer: usize) -> i64 {
        (per_layer.max(self.offset + self.limit * 2)) as i64
    }

    /// `text`, `keywords`, `topic`, `mixed` or `browse`.
    pub(crate) fn query_type(&self) -> &'static str {
        match (
            self.text.is_some(),
            !self.keywords.is_empty(),
            self.topic.is_some(),
        ) {
            (true, _, _) if self.topic.is_some() => "mixed",
            (true, _, _) => "text",
            (false, true, _) => "keywords",
            (false, false, true) => "topic",
            (false, false, false) => "browse",
        }
    }

    pub(crate) fn scope(&self) -> SearchScope<'_> {
        SearchScope {
            key_ids: &self.key_ids,
            agent_id: &self.agent_id,
            workspace: self.workspace.as_deref(),
            topic: self.topic.as_deref(),
            types: self.types.as_deref(),
            as_of: self.as_of,
            include_superseded: self.include_superseded,
            time_from: self.time_from,
            time_to: self.time_to,
            case_id: self.case_id.as_deref(),
            phase: self.phase.as_deref(),
            resolution_status: self.resolution_status.as_deref(),
            min_importance: self.min_importance,
            is_anchor: self.is_anchor,
            affects: self.affects.as_deref(),
            created_before: Some(self.snapshot),
            exclude: &self.exclude,
        }
    }
}

#[cfg(test)]
mod tests {
    use mneme_core::Permission;
    use mneme_core::principal::DEFAULT_AGENT_ID;

    use super::*;

    fn principal() -> Principal {
        Principal {
            tenant_id: Uuid::nil(),
            key_id: Uuid::nil(),
            group_key_ids: vec![],
            user_id: None,
            permissions: vec![Permission::Read],
            workspace: None,
            mode: None,
            session_id: None,
            agent_id: DEFAULT_AGENT_ID.into(),
        }
    }

    fn query(request: RecallRequest) -> Result<Query> {
        let settings = mneme_config::Config::defaults().recall;
        Query::new(
            request,
            &principal(),
            &settings,
            &Tokenizer::default(),
            Utc::now(),
        )
    }

    #[test]
    fn cursors_continue_only_their_own_query() {
        let first = query(RecallRequest {
            text: Some("coffee".into()),
            ..Default::default()
        })
        .unwrap();
        let page: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
        let cursor = first.next_cursor(&page);
        let second = query(RecallRequest {
            text: Some("coffee".into()),
            cursor: Some(cursor.clone()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(second.offset, 10);
        assert_eq!(
            second.returned,
            page.iter().map(result_tag).collect::<Vec<_>>()
        );
        assert_eq!(
            second.snapshot.timestamp_millis(),
            first.snapshot.timestamp_millis()
        );
        let other = query(RecallRequest {
            text: Some("tea".into()),
            cursor: Some(cursor),
            ..Default::default()
        })
        .unwrap_err();
        assert!(other.message.contains("different query"));
        assert!(
            query(RecallRequest {
                cursor: Some("garbage".into()),
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn depth_selects_types_unless_a_type_is_given() {
        let high = query(RecallRequest {
            depth: Some("high-level".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            high.types.as_deref(),
            Some(&["decision".to_owned(), "episode".to_owned()][..])
        );
        let typed = query(RecallRequest {
            depth: Some("high-level".into()),
            r#type: Some("error".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(typed.types.as_deref(), Some(&["error".to_owned()][..]));
        assert!(
            query(RecallRequest {
                depth: Some("shallow".into()),
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn query_types_and_filter_names_are_recorded() {
        let q = query(RecallRequest {
            keywords: vec!["redis".into()],
            case_id: Some("c-1".into()),
            time_from: Some("yesterday".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(q.query_type(), "keywords");
        assert_eq!(q.filter_keys, vec!["timeRange", "caseId"]);
        assert_eq!(
            query(RecallRequest::default()).unwrap().query_type(),
            "browse"
        );
        assert!(
            query(RecallRequest {
                affect: vec!["rage".into()],
                ..Default::default()
            })
            .is_err()
        );
    }
}
