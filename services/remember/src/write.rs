//! `remember` and `batch_remember`: validation, quota, the insert and the
//! work that follows it in the same transaction (case id, links,
//! supersession, case event).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use mneme_cache::WorkingMemoryItem;
use mneme_core::fragment::{PreparedFragment, RememberInput, prepare};
use mneme_core::principal::resolve_agent_id;
use mneme_core::{Error, ErrorCode, FragmentType, Permission, Principal, Result};
use mneme_proto::v1::{
    BatchItemResult, BatchProgress, BatchRememberRequest, BatchRememberResult, Conflict,
    ErrorDetail, Quota, RememberRequest, RememberResponse, WriteOutcome,
};
use mneme_store::fragments::{self, Author, SearchScope};
use mneme_store::links::{self, Edge};
use mneme_store::{Connection, TenantTx, api_keys, cases};
use uuid::Uuid;

use crate::RememberServer;

/// Most fragments stored by one bulk insert; a batch reports progress after
/// each. A few statements per insert, against one per fragment before.
const ROWS_PER_INSERT: usize = 50;
/// Attempts of a batch whose transaction deadlocked with a concurrent write
/// (two batches inserting the same content in another order, say): the
/// transaction rolled back whole, so it is run again rather than failed.
const BATCH_ATTEMPTS: usize = 3;
/// Cached quota counts are rebuilt exactly at least this often.
const QUOTA_CACHE_TTL: Duration = Duration::from_secs(60);
/// Conflict candidates examined per remember.
const CONFLICT_CANDIDATES: i64 = 5;
/// Conflicts reported per remember.
const MAX_CONFLICTS: usize = 3;
/// Distinctive terms whose pairs select conflict candidates.
const DISTINCTIVE_TERMS: usize = 4;

/// A validated request with everything resolved.
#[derive(Clone)]
pub(crate) struct Write {
    pub(crate) fragment: PreparedFragment,
    pub(crate) agent_id: String,
    pub(crate) session_id: Option<String>,
    pub(crate) linked_to: Vec<String>,
    pub(crate) supersedes: Vec<String>,
}

/// What a conflict lookup needs of a write, owned, so that the lookup can
/// run while the write's transaction settles the write's case.
pub(crate) struct ConflictProbe {
    content: String,
    agent_id: String,
    workspace: Option<String>,
}

impl ConflictProbe {
    fn of(write: &Write) -> Self {
        Self {
            content: write.fragment.content.clone(),
            agent_id: write.agent_id.clone(),
            workspace: write.fragment.workspace.clone(),
        }
    }
}

/// What became of one item of a multi-fragment write.
pub(crate) struct Stored {
    pub index: usize,
    pub id: Uuid,
    pub outcome: WriteOutcome,
    pub keywords: Vec<String>,
}

/// What creating one fragment entailed.
#[derive(Debug, Default)]
pub(crate) struct Entailed {
    /// Links created, supersessions included.
    pub links_created: u32,
    pub superseded: Vec<String>,
    pub warnings: Vec<String>,
}

/// The outcome of a stored write; a write whose idempotency key is another
/// memory's is refused (nothing was written), since returning that memory
/// as a replay would drop this one unseen.
fn outcome_of(written: &fragments::Written, write: &Write) -> Result<WriteOutcome> {
    Ok(match written.outcome {
        fragments::WriteOutcome::Created => WriteOutcome::Created,
        fragments::WriteOutcome::Duplicate => WriteOutcome::Duplicate,
        fragments::WriteOutcome::Replayed => WriteOutcome::Replayed,
        fragments::WriteOutcome::KeyTaken => {
            return Err(Error::invalid_argument(format!(
                "idempotencyKey `{}` was already used for another memory ({}) with other \
                 content; nothing was stored: use a new key for a new memory, or amend that one",
                write
                    .fragment
                    .idempotency_key
                    .as_deref()
                    .unwrap_or_default(),
                written.id
            )));
        }
    })
}

/// Whether a write may open or join its session's case: an error or fix
/// (a case event type) of a session that names no case itself.
fn needs_case_resolution(write: &Write) -> bool {
    write.fragment.case.case_id.is_none()
        && case_event_type(write.fragment.fragment_type).is_some()
        && write.session_id.is_some()
}

/// The case event a fragment type stands for, if any.
fn case_event_type(fragment_type: FragmentType) -> Option<&'static str> {
    match fragment_type {
        FragmentType::Error => Some("error_observed"),
        FragmentType::Decision => Some("decision_committed"),
        FragmentType::Procedure => Some("fix_attempted"),
        _ => None,
    }
}

/// Share of `a` also in `b`.
fn overlap<'a>(a: &HashSet<&'a str>, b: &HashSet<&'a str>) -> f64 {
    if a.is_empty() {
        return 0.0;
    }
    a.intersection(b).count() as f64 / a.len() as f64
}

impl RememberServer {
    pub(crate) fn validate(
        &self,
        principal: &Principal,
        request: RememberRequest,
    ) -> Result<Write> {
        let agent_id = resolve_agent_id(request.agent_id.as_deref(), principal)?;
        let occurred_at = match request.occurred_at_unix_ms {
            None => None,
            Some(ms) => Some(
                DateTime::<Utc>::from_timestamp_millis(ms)
                    .ok_or_else(|| Error::invalid_argument("occurredAt is out of range"))?,
            ),
        };
        let input = RememberInput {
            content: request.content,
            topic: request.topic,
            fragment_type: request.r#type,
            keywords: request.keywords,
            importance: request.importance,
            is_anchor: request.is_anchor,
            source: request.source,
            workspace: request.workspace.or_else(|| principal.workspace.clone()),
            idempotency_key: request.idempotency_key,
            context_summary: request.context_summary,
            case_id: request.case_id,
            goal: request.goal,
            outcome: request.outcome,
            phase: request.phase,
            resolution_status: request.resolution_status,
            assertion_status: request.assertion_status,
            affect: request.affect,
            occurred_at,
        };
        Ok(Write {
            fragment: prepare(input, &self.settings.limits, &self.tokenizer)?,
            agent_id,
            session_id: request
                .session_id
                .filter(|s| !s.trim().is_empty())
                .or_else(|| principal.session_id.clone()),
            linked_to: request.linked_to,
            supersedes: request.supersedes,
        })
    }

    /// Checks that `adding` more fragments fit the key's quota. Far from the
    /// limit a cached count suffices; near it the key row is locked and the
    /// count is exact, so concurrent writers cannot overshoot together.
    /// Returns the quota as checked.
    pub(crate) async fn check_quota(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        adding: u64,
    ) -> Result<Quota> {
        let tenant = principal.tenant_id.to_string();
        let key = principal.key_id.to_string();
        let Some(limit) = api_keys::fragment_limit(tx, principal.key_id, false).await? else {
            return Ok(Quota {
                limit: None,
                used: 0,
            });
        };
        let limit = u64::try_from(limit).unwrap_or(0);
        let cheap_below = (limit as f64 * self.settings.quota_exact_ratio) as u64;
        if let Some(cached) = self.cache.quota_count(&tenant, &key).await
            && (cached.max(0) as u64) + adding < cheap_below
        {
            return Ok(Quota {
                limit: Some(limit as u32),
                used: cached.max(0) as u64,
            });
        }
        api_keys::fragment_limit(tx, principal.key_id, true).await?;
        let used = fragments::count_active(tx, principal.key_id).await?.max(0) as u64;
        self.cache
            .set_quota_count(&tenant, &key, used as i64, QUOTA_CACHE_TTL)
            .await;
        if used + adding > limit {
            return Err(Error::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "this API key holds {used} of its {limit} memories; forget some or ask an \
                     administrator to raise the limit"
                ),
            ));
        }
        Ok(Quota {
            limit: Some(limit as u32),
            used,
        })
    }

    /// Stored fragments saying much the same: possible conflicts for the
    /// caller to review. Read-only.
    async fn conflicts(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        probe: &ConflictProbe,
        exclude: Option<Uuid>,
    ) -> Result<Vec<Conflict>> {
        // Candidates share at least two distinctive terms: selective enough
        // for the index to do the work however many fragments exist.
        let Some(tsquery) = self
            .tokenizer
            .shared_pairs_query(&probe.content, DISTINCTIVE_TERMS)
        else {
            return Ok(Vec::new());
        };
        let key_ids = principal.readable_key_ids();
        let scope = SearchScope {
            key_ids: &key_ids,
            agent_id: &probe.agent_id,
            workspace: probe.workspace.as_deref(),
            ..SearchScope::default()
        };
        let neighbors =
            fragments::lexical_neighbors(tx, &scope, &tsquery, exclude, CONFLICT_CANDIDATES)
                .await?;
        let mine = self.tokenizer.lexemes(&probe.content);
        let mine: HashSet<&str> = mine.iter().map(String::as_str).collect();
        let mut conflicts: Vec<Conflict> = neighbors
            .into_iter()
            .filter(|n| n.content != probe.content)
            .filter_map(|n| {
                let theirs = self.tokenizer.lexemes(&n.content);
                let theirs: HashSet<&str> = theirs.iter().map(String::as_str).collect();
                let share = overlap(&mine, &theirs);
                (share >= self.settings.conflict_min_overlap).then(|| Conflict {
                    id: n.id.to_string(),
                    content: n.content.chars().take(100).collect(),
                    overlap: share as f32,
                })
            })
            .collect();
        conflicts.sort_by(|a, b| b.overlap.total_cmp(&a.overlap));
        conflicts.truncate(MAX_CONFLICTS);
        Ok(conflicts)
    }

    /// [`Self::conflicts`] in a read-only transaction of its own on
    /// `client`, so that it runs while the write's transaction does. It
    /// cannot see the new fragment, which has not committed.
    async fn conflicts_beside(
        &self,
        mut client: Connection,
        principal: &Principal,
        probe: &ConflictProbe,
    ) -> Result<Vec<Conflict>> {
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let conflicts = self.conflicts(&tx, principal, probe, None).await?;
        tx.commit().await?;
        Ok(conflicts)
    }

    /// The cases new fragments join, decided in the writes' order as if
    /// each were stored before the next: the case a write names, else the
    /// case of the latest fragment of its session and topic, else — for an
    /// error, or a decision or procedure following errors — a new case.
    /// At most two statements however many writes (the stored cases of
    /// their sessions and topics, then the adoption of earlier errors
    /// without one), so a batch need not store its writes one at a time.
    async fn resolve_cases(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        writes: Vec<&mut Write>,
    ) -> Result<()> {
        let mut pending: Vec<(String, String, &mut Write)> = writes
            .into_iter()
            .filter(|write| needs_case_resolution(write))
            .filter_map(|write| {
                let session = write.session_id.clone()?;
                Some((session, write.fragment.topic.clone(), write))
            })
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for (session, topic, _) in &pending {
            if !pairs.contains(&(session.as_str(), topic.as_str())) {
                pairs.push((session, topic));
            }
        }
        let mut joined = cases::cases_of_session_topics(tx, principal.key_id, &pairs).await?;
        // A pair without a case gets one id up front; its first error (or
        // any write, once earlier errors were adopted into it) opens it.
        let opened: HashMap<(String, String), String> = pairs
            .iter()
            .filter(|&&(s, t)| !joined.contains_key(&(s.to_owned(), t.to_owned())))
            .map(|&(s, t)| {
                let pair = (s.to_owned(), t.to_owned());
                (pair, format!("case-{}", Uuid::now_v7()))
            })
            .collect();
        let adoptions: Vec<(&str, &str, &str)> = opened
            .iter()
            .map(|((s, t), case_id)| (s.as_str(), t.as_str(), case_id.as_str()))
            .collect();
        let adopted = cases::adopt_session_errors(tx, principal.key_id, &adoptions).await?;
        for (session, topic, write) in &mut pending {
            let pair = (std::mem::take(session), std::mem::take(topic));
            if let Some(case_id) = joined.get(&pair) {
                write.fragment.case.case_id = Some(case_id.clone());
            } else if write.fragment.fragment_type == FragmentType::Error || adopted.contains(&pair)
            {
                let case_id = opened[&pair].clone();
                write.fragment.case.case_id = Some(case_id.clone());
                joined.insert(pair, case_id);
            }
        }
        Ok(())
    }

    /// What newly created fragments entail inside their transaction, in
    /// the order given (a case's events chain in that order): the links
    /// their writers asked for, supersession, their case events and their
    /// place in the automatic-link queue. Links, events and the queue take
    /// one statement each however many fragments.
    async fn after_insert(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        created: &[(Uuid, &Write)],
    ) -> Result<Vec<Entailed>> {
        let key_ids = principal.readable_key_ids();
        let mut entailed: Vec<Entailed> = Vec::with_capacity(created.len());
        for (id, write) in created {
            let mut entail = Entailed::default();
            if !write.supersedes.is_empty() {
                let old: Vec<Uuid> = write
                    .supersedes
                    .iter()
                    .filter_map(|s| s.trim().parse().ok())
                    .collect();
                let done = fragments::supersede(tx, principal.key_id, &old, *id).await?;
                for requested in &write.supersedes {
                    if !done.iter().any(|d| d.to_string() == requested.trim()) {
                        entail.warnings.push(format!(
                            "supersedes: no valid fragment `{requested}` of this API key to \
                             supersede"
                        ));
                    }
                }
                entail.superseded = done.iter().map(Uuid::to_string).collect();
            }
            entailed.push(entail);
        }

        let link_target =
            |raw: &str, id: Uuid| raw.trim().parse::<Uuid>().ok().filter(|t| *t != id);
        let edges: Vec<Edge> = created
            .iter()
            .flat_map(|(id, write)| {
                write.linked_to.iter().filter_map(move |raw| {
                    Some(Edge {
                        from_id: *id,
                        to_id: link_target(raw, *id)?,
                        relation_type: "related".to_owned(),
                        weight: 1.0,
                    })
                })
            })
            .collect();
        let linked: HashSet<(Uuid, Uuid)> = links::upsert_edges(tx, &key_ids, &edges)
            .await?
            .into_iter()
            .map(|(from, to, _)| (from, to))
            .collect();
        let mut links_from: HashMap<Uuid, usize> = HashMap::new();
        for (from, _) in &linked {
            *links_from.entry(*from).or_default() += 1;
        }
        for ((id, write), entail) in created.iter().zip(&mut entailed) {
            for raw in &write.linked_to {
                if !link_target(raw, *id).is_some_and(|t| linked.contains(&(*id, t))) {
                    entail
                        .warnings
                        .push(format!("linkedTo: no fragment `{raw}` to link to"));
                }
            }
            let links = links_from.get(id).copied().unwrap_or(0);
            entail.links_created =
                u32::try_from(links + entail.superseded.len()).unwrap_or(u32::MAX);
        }

        let summaries: Vec<String> = created
            .iter()
            .map(|(_, write)| write.fragment.content.chars().take(200).collect())
            .collect();
        let events: Vec<cases::NewEvent<'_>> = created
            .iter()
            .zip(&summaries)
            .filter_map(|((id, write), summary)| {
                Some(cases::NewEvent {
                    key_id: principal.key_id,
                    case_id: write.fragment.case.case_id.as_deref()?,
                    session_id: write.session_id.as_deref(),
                    event_type: case_event_type(write.fragment.fragment_type)?,
                    summary,
                    entity_keys: &write.fragment.keywords,
                    source_fragment_id: Some(*id),
                })
            })
            .collect();
        let new_ids: Vec<Uuid> = created.iter().map(|(id, _)| *id).collect();
        // Pipelined on the transaction's connection.
        let (appended, queued) = tokio::join!(
            cases::append_many(tx, &events),
            self.auto_linker.enqueue(tx, &new_ids)
        );
        appended?;
        queued?;
        Ok(entailed)
    }

    /// Inserts validated fragments in `tx`, in bulk inserts of up to
    /// [`ROWS_PER_INSERT`], then what their creation entails (links,
    /// supersession, case events) in the writes' own order. `on_stored`
    /// receives the running count. Returns every item's outcome and the
    /// fragments created, for the symbolic layer's claims. Cases are resolved
    /// beforehand ([`Self::resolve_cases`]).
    pub(crate) async fn store_all(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        writes: Vec<(usize, Write)>,
        mut on_stored: impl FnMut(usize),
    ) -> Result<(Vec<Stored>, Vec<(Uuid, Write)>)> {
        let mut stored = Vec::with_capacity(writes.len());
        let mut created: Vec<(usize, Uuid, Write)> = Vec::new();
        let mut writes = writes.into_iter().peekable();
        while writes.peek().is_some() {
            let run: Vec<(usize, Write)> = writes.by_ref().take(ROWS_PER_INSERT).collect();
            self.insert_run(tx, principal, run, &mut stored, &mut created)
                .await?;
            on_stored(stored.len());
        }
        created.sort_by_key(|(index, ..)| *index);
        let entailing: Vec<(Uuid, &Write)> = created.iter().map(|(_, id, w)| (*id, w)).collect();
        self.after_insert(tx, principal, &entailing).await?;
        Ok((
            stored,
            created
                .into_iter()
                .map(|(_, id, write)| (id, write))
                .collect(),
        ))
    }

    /// Inserts `run` (one statement for the lot when there are several).
    /// Writes that hit a unique constraint are settled as duplicates
    /// together, or one by one as replays.
    async fn insert_run(
        &self,
        tx: &TenantTx<'_>,
        principal: &Principal,
        run: Vec<(usize, Write)>,
        stored: &mut Vec<Stored>,
        created: &mut Vec<(usize, Uuid, Write)>,
    ) -> Result<()> {
        fn author<'w>(principal: &Principal, write: &'w Write) -> Author<'w> {
            Author {
                key_id: principal.key_id,
                agent_id: &write.agent_id,
                session_id: write.session_id.as_deref(),
            }
        }
        let mut bulk: Vec<Option<fragments::Written>> = if run.len() > 1 {
            let rows: Vec<_> = run
                .iter()
                .map(|(_, write)| (author(principal, write), &write.fragment))
                .collect();
            fragments::insert_many(tx, &rows).await?
        } else {
            vec![None; run.len()]
        };
        // Contents the key already holds (an import run again, say) are
        // settled together; replays of idempotency keys one by one.
        if run.len() > 1 {
            let repeated: Vec<usize> = (0..run.len())
                .filter(|&i| bulk[i].is_none() && run[i].1.fragment.idempotency_key.is_none())
                .collect();
            let contents: Vec<&PreparedFragment> =
                repeated.iter().map(|&i| &run[i].1.fragment).collect();
            let settled = fragments::settle_duplicates(tx, principal.key_id, &contents).await?;
            for (i, written) in repeated.into_iter().zip(settled) {
                bulk[i] = written;
            }
        }
        for ((index, write), written) in run.into_iter().zip(bulk) {
            let written = match written {
                Some(written) => written,
                None => fragments::insert(tx, author(principal, &write), &write.fragment).await?,
            };
            let outcome = outcome_of(&written, &write).map_err(|error| {
                Error::invalid_argument(format!("item {index}: {}", error.message))
            })?;
            stored.push(Stored {
                index,
                id: written.id,
                outcome,
                keywords: written.keywords,
            });
            if outcome == WriteOutcome::Created {
                created.push((index, written.id, write));
            }
        }
        Ok(())
    }

    /// What follows a committed write of `created` new fragments: the quota
    /// count, the embedding worker's wake-up and a drain of the
    /// automatic-link queue.
    pub(crate) async fn after_commit(&self, principal: &Principal, created: u32) {
        if created > 0 {
            let tenant = principal.tenant_id.to_string();
            let key = principal.key_id.to_string();
            tokio::join!(
                Box::pin(
                    self.cache
                        .add_quota_count(&tenant, &key, i64::from(created))
                ),
                Box::pin(self.cache.wake_embedding_worker(&tenant)),
            );
            self.auto_linker.kick(principal.tenant_id);
        }
    }

    /// Stores a session-scoped fragment in the session's working memory.
    async fn remember_in_session(
        &self,
        principal: &Principal,
        write: Write,
    ) -> Result<RememberResponse> {
        let session = write.session_id.clone().ok_or_else(|| {
            Error::invalid_argument(
                "scope `session` needs a session: call over an MCP session or pass sessionId",
            )
        })?;
        let id = Uuid::now_v7().to_string();
        let item = WorkingMemoryItem {
            id: id.clone(),
            content: write.fragment.content.clone(),
            topic: write.fragment.topic.clone(),
            fragment_type: write.fragment.fragment_type.as_str().to_owned(),
            keywords: write.fragment.keywords.clone(),
            importance: write.fragment.importance,
            tokens: write.fragment.estimated_tokens,
            created_at_unix_ms: Utc::now().timestamp_millis(),
        };
        self.cache
            .push_working_memory(
                &mneme_cache::session_owner(principal.tenant_id, principal.key_id),
                &session,
                &item,
                self.settings.working_memory_tokens,
                self.settings.working_memory_ttl,
            )
            .await
            .map_err(|error| {
                tracing::warn!(%error, "working memory unavailable");
                Error::unavailable("session memory is unavailable; retry or store it permanently")
            })?;
        Ok(RememberResponse {
            id,
            outcome: WriteOutcome::Created as i32,
            keywords: write.fragment.keywords,
            importance: write.fragment.importance,
            ttl_tier: "session".into(),
            redactions: u32::try_from(write.fragment.redactions).unwrap_or(u32::MAX),
            scope: "session".into(),
            ..Default::default()
        })
    }

    /// Validates and stores one fragment.
    pub async fn remember(
        &self,
        principal: &Principal,
        request: RememberRequest,
    ) -> Result<RememberResponse> {
        principal.require(Permission::Write)?;
        let scope = request.scope.clone().unwrap_or_default();
        let dry_run = request.dry_run;
        let mut write = self.validate(principal, request)?;
        match scope.trim() {
            "" | "permanent" => {}
            "session" if !dry_run => return self.remember_in_session(principal, write).await,
            "session" => {}
            other => {
                return Err(Error::invalid_argument(format!(
                    "unknown scope `{other}` (expected permanent or session)"
                )));
            }
        }

        // Before the transaction: a hard gate refuses with nothing begun.
        let policy_warnings = self.policy_gate(principal, &write).await?;
        let mut client = self.store.client().await?;
        if dry_run {
            return self
                .simulate(client, principal, write, &scope, policy_warnings)
                .await;
        }
        // Conflict hints are looked up while the write's transaction runs,
        // on a connection of their own when one is free (else inside the
        // transaction, after the insert): a write's acknowledgement then
        // waits for the longer of the two, not for both.
        let probe = ConflictProbe::of(&write);
        let spare = self.store.spare_client().await;
        let look_inside = spare.is_none();
        let beside = async {
            match spare {
                Some(spare) => Some(self.conflicts_beside(spare, principal, &probe).await),
                None => None,
            }
        };
        let store = async {
            let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
            self.check_quota(&tx, principal, 1).await?;
            self.resolve_cases(&tx, principal, vec![&mut write]).await?;
            let author = Author {
                key_id: principal.key_id,
                agent_id: &write.agent_id,
                session_id: write.session_id.as_deref(),
            };
            let written = fragments::insert(&tx, author, &write.fragment).await?;
            let created = outcome_of(&written, &write)? == WriteOutcome::Created;
            let entailed = if created {
                self.after_insert(&tx, principal, &[(written.id, &write)])
                    .await?
                    .pop()
                    .unwrap_or_default()
            } else {
                Entailed::default()
            };
            let conflicts = if look_inside {
                self.conflicts(&tx, principal, &probe, Some(written.id))
                    .await?
            } else {
                Vec::new()
            };
            tx.commit().await?;
            Ok::<_, Error>((written, entailed, conflicts))
        };
        // Boxed: together the two would make every caller's future large.
        let (beside, stored) = tokio::join!(Box::pin(beside), Box::pin(store));
        let (
            written,
            Entailed {
                links_created,
                superseded,
                mut warnings,
            },
            mut conflicts,
        ) = stored?;
        warnings.extend(policy_warnings);
        match beside {
            // The lookup could not see the new fragment, but it may have
            // found the one a replayed write returns.
            Some(Ok(found)) => {
                conflicts = found
                    .into_iter()
                    .filter(|c| c.id != written.id.to_string())
                    .collect()
            }
            // The write is committed: a failed hint lookup must not fail it.
            Some(Err(error)) => {
                tracing::warn!(%error, "conflict hints of a write could not be looked up");
                warnings.push("conflict hints are unavailable for this write".into());
            }
            None => {}
        }

        let outcome = outcome_of(&written, &write)?;
        let redactions = u32::try_from(write.fragment.redactions).unwrap_or(u32::MAX);
        let case_id = write.fragment.case.case_id.clone();
        if outcome == WriteOutcome::Created {
            self.analyse_claims(principal, &write, written.id, &mut conflicts, &mut warnings)
                .await;
            self.after_commit(principal, 1).await;
        }
        if written.importance < 0.3 {
            warnings.push(format!(
                "importance {:.2} is low: this memory is short-lived unless it is recalled or amended",
                written.importance
            ));
        }
        tracing::info!(
            tenant.id = %principal.tenant_id,
            fragment.id = %written.id,
            outcome = ?outcome,
            "fragment remembered"
        );
        Ok(RememberResponse {
            id: written.id.to_string(),
            outcome: outcome as i32,
            keywords: written.keywords,
            importance: written.importance,
            ttl_tier: written.ttl_tier,
            redactions,
            conflicts,
            warnings,
            case_id,
            scope: "permanent".into(),
            dry_run: false,
            superseded,
            links_created,
            quota: None,
        })
    }

    /// A dry run of [`Self::remember`]: everything a write would report
    /// (quota, conflicts, case, warnings), in a transaction that is dropped.
    async fn simulate(
        &self,
        mut client: Connection,
        principal: &Principal,
        mut write: Write,
        scope: &str,
        mut warnings: Vec<String>,
    ) -> Result<RememberResponse> {
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let quota = self.check_quota(&tx, principal, 1).await;
        let conflicts = self
            .conflicts(&tx, principal, &ConflictProbe::of(&write), None)
            .await?;
        self.resolve_cases(&tx, principal, vec![&mut write]).await?;
        let quota = match quota {
            Ok(quota) => Some(quota),
            Err(error) => {
                warnings.push(error.message);
                None
            }
        };
        // Nothing of a dry run may persist: the transaction is dropped.
        drop(tx);
        Ok(RememberResponse {
            keywords: write.fragment.keywords.clone(),
            importance: write.fragment.importance,
            ttl_tier: write.fragment.ttl_tier.as_str().to_owned(),
            redactions: u32::try_from(write.fragment.redactions).unwrap_or(u32::MAX),
            conflicts,
            warnings,
            case_id: write.fragment.case.case_id.clone(),
            scope: if scope.trim() == "session" {
                "session"
            } else {
                "permanent"
            }
            .into(),
            dry_run: true,
            quota,
            ..Default::default()
        })
    }

    /// One attempt at storing a batch's valid items, committed together.
    async fn store_batch(
        &self,
        principal: &Principal,
        mut valid: Vec<(usize, Write)>,
        on_stored: impl FnMut(usize),
    ) -> Result<(Vec<Stored>, Vec<(Uuid, Write)>)> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        self.check_quota(&tx, principal, valid.len() as u64).await?;
        // Cases follow the callers' order (an error opens one, the fix
        // after it joins); once they are settled the order of insertion no
        // longer matters.
        self.resolve_cases(&tx, principal, valid.iter_mut().map(|(_, w)| w).collect())
            .await?;
        // Concurrent writes of the same memories wait for each other's
        // uncommitted rows; inserted in one global order (by content hash)
        // they never wait in a cycle. Two imports of one key in opposite
        // orders otherwise deadlocked and, retried together, deadlocked
        // again.
        valid.sort_by(|(_, a), (_, b)| a.fragment.content_hash.cmp(&b.fragment.content_hash));
        let stored = self.store_all(&tx, principal, valid, on_stored).await?;
        tx.commit().await?;
        Ok(stored)
    }

    /// Stores up to `batch_max_items` fragments in one transaction. Items
    /// that fail validation are reported and skipped; the valid ones are
    /// stored together or not at all. `progress` receives monotonic progress
    /// after validation and every few stored items.
    pub async fn batch_remember(
        &self,
        principal: &Principal,
        request: BatchRememberRequest,
        progress: impl Fn(BatchProgress),
    ) -> Result<BatchRememberResult> {
        principal.require(Permission::Write)?;
        let total = request.items.len();
        if total == 0 {
            return Err(Error::invalid_argument("fragments must not be empty"));
        }
        if total > self.settings.batch_max_items {
            return Err(Error::invalid_argument(format!(
                "{total} fragments in one batch; the limit is {}",
                self.settings.batch_max_items
            )));
        }
        let total_u32 = u32::try_from(total).unwrap_or(u32::MAX);
        let mut results: Vec<BatchItemResult> = Vec::with_capacity(total);
        let mut valid: Vec<(usize, Write)> = Vec::with_capacity(total);
        for (index, mut item) in request.items.into_iter().enumerate() {
            if item.workspace.is_none() {
                item.workspace.clone_from(&request.workspace);
            }
            if item.agent_id.is_none() {
                item.agent_id.clone_from(&request.agent_id);
            }
            let scoped = item
                .scope
                .as_deref()
                .is_some_and(|s| !s.trim().is_empty() && s.trim() != "permanent");
            let checked = if scoped || item.dry_run {
                Err(Error::invalid_argument(
                    "batch items are stored permanently; scope and dryRun are not supported",
                ))
            } else {
                self.validate(principal, item)
            };
            match checked {
                Ok(write) => valid.push((index, write)),
                Err(error) => results.push(BatchItemResult {
                    index: index as u32,
                    id: None,
                    outcome: WriteOutcome::Unspecified as i32,
                    error: Some(ErrorDetail {
                        code: error.code.as_str().to_owned(),
                        message: error.message,
                    }),
                }),
            }
        }
        // Steps: one per item validated, one per valid item stored.
        let steps = total_u32 + valid.len() as u32;
        progress(BatchProgress {
            phase: "validate".into(),
            processed: total_u32,
            total: steps,
        });

        let (mut created, mut existing) = (0u32, 0u32);
        if !valid.is_empty() {
            // A retried attempt starts over; its progress is reported only
            // past what the clients already saw, so it stays monotonic.
            let reported = AtomicU32::new(total_u32);
            let report = |processed: u32| {
                if processed > reported.fetch_max(processed, Ordering::Relaxed) {
                    progress(BatchProgress {
                        phase: "store".into(),
                        processed,
                        total: steps,
                    });
                }
            };
            let mut attempt = 1;
            let (stored, new_fragments) = loop {
                match self
                    .store_batch(principal, valid.clone(), |done| {
                        // The last step is reported once committed.
                        if total_u32 + (done as u32) < steps {
                            report(total_u32 + done as u32);
                        }
                    })
                    .await
                {
                    Err(error) if error.code == ErrorCode::Conflict && attempt < BATCH_ATTEMPTS => {
                        tracing::debug!(
                            attempt,
                            "batch conflicted with a concurrent write; retrying"
                        );
                        attempt += 1;
                    }
                    outcome => break outcome?,
                }
            };
            report(steps);
            for item in stored {
                if item.outcome == WriteOutcome::Created {
                    created += 1;
                } else {
                    existing += 1;
                }
                results.push(BatchItemResult {
                    index: item.index as u32,
                    id: Some(item.id.to_string()),
                    outcome: item.outcome as i32,
                    error: None,
                });
            }
            self.spawn_claim_storage(principal, &new_fragments);
            self.after_commit(principal, created).await;
        }
        results.sort_by_key(|r| r.index);
        let rejected = total_u32 - created - existing;
        tracing::info!(tenant.id = %principal.tenant_id, created, existing, rejected, "batch remembered");
        Ok(BatchRememberResult {
            results,
            created,
            existing,
            rejected,
        })
    }
}
