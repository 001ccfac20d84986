//! The symbolic layer on the write path (`MNEME_SYMBOLIC_*`, all off by
//! default):
//!
//! - [`RememberServer::policy_gate`], before the insert: the policy rules
//!   of `mneme_core::policy`. Soft gate: violations become warnings. Hard
//!   gate (keys with `api_keys.symbolic_hard_gate`): the write is refused
//!   with `invalid_argument`, before anything is stored. Dry runs pass the
//!   same gate, so they predict the real write.
//! - [`RememberServer::analyse_claims`], after the commit: the new
//!   fragment's claims are extracted (`mneme_core::claims`), stored, and
//!   compared with stored claims of fragments the key can read; opposite
//!   polarities on the same statement are reported as conflicts and
//!   warnings. Nothing else changes (no link, no supersession): the agent
//!   decides.
//!
//! Neither step can fail a `remember` that would otherwise succeed: the
//! claim step runs in a transaction of its own, after the fragment is
//! committed, under `MNEME_SYMBOLIC_TIMEOUT_MS`; a failure or a timeout is
//! logged and reported as a warning. Only the hard gate refuses, and only
//! when it could read the key's setting (an unreadable setting falls back
//! to the soft gate).

use std::collections::HashSet;
use std::sync::LazyLock;

use mneme_core::claims::{self, Claim, RULE_EXTRACTOR};
use mneme_core::policy::{self, PolicyInput};
use mneme_core::{Error, Principal, Result};
use mneme_proto::v1::Conflict;
use mneme_store::TenantTx;
use mneme_store::claims::{self as claim_store, ClaimRow, ConflictScope, Provenance};
use mneme_telemetry::metrics::register;
use prometheus::{IntCounterVec, Opts};
use uuid::Uuid;

use crate::RememberServer;
use crate::write::Write;

/// Stored claims below this confidence are not held against a new one
/// (rule-based claims are 0.5–0.8; uncertain ones never conflict).
const MIN_CONFLICT_CONFIDENCE: f32 = 0.5;
/// Conflicting fragments reported per remember.
const MAX_REPORTED: usize = 5;
/// Characters of a conflicting fragment shown, as for lexical conflicts.
const PREVIEW_CHARS: usize = 100;

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

static CLAIMS_EXTRACTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "mneme_symbolic_claims_extracted_total",
        "Claims extracted from stored memories, by extractor and polarity.",
        &["extractor", "polarity"],
    )
});
static WARNINGS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "mneme_symbolic_warnings_total",
        "Symbolic warnings on remember (policy violations, claim conflicts), by rule and severity.",
        &["rule", "severity"],
    )
});
static GATE_BLOCKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter(
        "mneme_symbolic_gate_blocks_total",
        "Writes refused by a key's symbolic hard gate, by phase.",
        &["phase"],
    )
});

fn rows(claims: &[Claim]) -> Vec<ClaimRow<'_>> {
    claims
        .iter()
        .map(|c| ClaimRow {
            subject: &c.subject,
            predicate: &c.predicate,
            object: &c.object,
            polarity: c.polarity.as_str(),
            confidence: c.confidence,
        })
        .collect()
}

impl RememberServer {
    /// The policy rules for `write`: warnings to return (soft gate), or the
    /// refusal (hard gate).
    pub(crate) async fn policy_gate(
        &self,
        principal: &Principal,
        write: &Write,
    ) -> Result<Vec<String>> {
        let symbolic = &self.settings.symbolic;
        if !symbolic.checks_policy() {
            return Ok(Vec::new());
        }
        let fragment = &write.fragment;
        let violations = policy::check(&PolicyInput {
            fragment_type: fragment.fragment_type,
            content: &fragment.content,
            linked_to: write.linked_to.len(),
            case_id: fragment.case.case_id.as_deref(),
            resolution_status: fragment.case.resolution_status.map(|s| s.as_str()),
        });
        if violations.is_empty() {
            return Ok(Vec::new());
        }
        let described: Vec<String> = violations.iter().map(|v| v.describe()).collect();
        for violation in &violations {
            WARNINGS
                .with_label_values(&[violation.rule, violation.severity])
                .inc();
            tracing::info!(
                rule = violation.rule,
                severity = violation.severity,
                rule_version = policy::RULE_VERSION,
                "symbolic policy violation"
            );
        }
        match self.hard_gate(principal).await {
            Ok(true) => {
                GATE_BLOCKS.with_label_values(&["remember"]).inc();
                tracing::info!(
                    tenant.id = %principal.tenant_id,
                    phase = "remember",
                    "symbolic hard gate refused a write"
                );
                Err(Error::invalid_argument(format!(
                    "this API key refuses memories that break its policy rules ({}): {}",
                    policy::RULE_VERSION,
                    described.join("; ")
                )))
            }
            Ok(false) => Ok(described
                .into_iter()
                .map(|d| format!("policy {d}"))
                .collect()),
            Err(error) => {
                tracing::warn!(%error, "cannot read the key's hard-gate setting; warning only");
                Ok(described
                    .into_iter()
                    .map(|d| format!("policy {d}"))
                    .collect())
            }
        }
    }

    /// Whether the principal's key has opted into the hard gate. Read on a
    /// connection of its own, so a failure here cannot abort the write's
    /// transaction.
    async fn hard_gate(&self, principal: &Principal) -> Result<bool> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        Ok(claim_store::hard_gate(&tx, principal.key_id).await?)
    }

    /// Extracts, stores and compares the claims of the fragment `id` just
    /// committed from `write`; adds what it finds to `conflicts` and
    /// `warnings`. Never fails: see the module docs.
    pub(crate) async fn analyse_claims(
        &self,
        principal: &Principal,
        write: &Write,
        id: Uuid,
        conflicts: &mut Vec<Conflict>,
        warnings: &mut Vec<String>,
    ) {
        let symbolic = &self.settings.symbolic;
        if !(symbolic.stores_claims() || symbolic.detects_conflicts()) {
            return;
        }
        let extracted = claims::extract(&write.fragment.content);
        if extracted.is_empty() {
            return;
        }
        let step = self.store_and_compare(principal, write, id, &extracted);
        let found = match tokio::time::timeout(symbolic.timeout, step).await {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                tracing::warn!(%error, fragment.id = %id, "symbolic claim step failed; memory stored without it");
                warnings.push(
                    "symbolic: the memory is stored, but its claims could not be checked this time"
                        .into(),
                );
                return;
            }
            Err(_) => {
                tracing::warn!(
                    fragment.id = %id,
                    timeout_ms = symbolic.timeout.as_millis() as u64,
                    "symbolic claim step timed out; memory stored without it"
                );
                warnings.push(
                    "symbolic: the memory is stored, but checking its claims took too long".into(),
                );
                return;
            }
        };
        self.report(write, &extracted, found, conflicts, warnings);
    }

    /// Stores the claims of fragments written in bulk (`batch_remember`,
    /// `reflect`) in the background, so later writes can be checked against
    /// them. Bulk writes report no polarity conflicts of their own: their
    /// per-item results stay as they are. Failures are logged only.
    pub(crate) fn spawn_claim_storage(&self, principal: &Principal, created: &[(Uuid, Write)]) {
        let symbolic = &self.settings.symbolic;
        if !symbolic.stores_claims() || created.is_empty() {
            return;
        }
        let contents: Vec<(Uuid, String)> = created
            .iter()
            .map(|(id, write)| (*id, write.fragment.content.clone()))
            .collect();
        let (server, principal) = (self.clone(), principal.clone());
        self.background.spawn(async move {
            let timeout = server.settings.symbolic.timeout * contents.len().max(1) as u32;
            let step = server.store_claims_of(&principal, &contents);
            match tokio::time::timeout(timeout, step).await {
                Ok(Ok(stored)) => tracing::debug!(stored, "symbolic claims of a bulk write stored"),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "storing the claims of a bulk write failed")
                }
                Err(_) => tracing::warn!("storing the claims of a bulk write timed out"),
            }
        });
    }

    async fn store_claims_of(
        &self,
        principal: &Principal,
        contents: &[(Uuid, String)],
    ) -> Result<u64> {
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        let mut stored = 0;
        for (id, content) in contents {
            let extracted = claims::extract(content);
            if extracted.is_empty() {
                continue;
            }
            for claim in &extracted {
                CLAIMS_EXTRACTED
                    .with_label_values(&[RULE_EXTRACTOR, claim.polarity.as_str()])
                    .inc();
            }
            stored += claim_store::insert(
                &tx,
                principal.key_id,
                *id,
                &rows(&extracted),
                Provenance {
                    extractor: RULE_EXTRACTOR,
                    rule_version: &self.settings.symbolic.rule_version,
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// The database part of [`Self::analyse_claims`], in one transaction.
    async fn store_and_compare(
        &self,
        principal: &Principal,
        write: &Write,
        id: Uuid,
        extracted: &[Claim],
    ) -> Result<Vec<claim_store::PolarityConflict>> {
        let symbolic = &self.settings.symbolic;
        let claim_rows = rows(extracted);
        let mut client = self.store.client().await?;
        let tx = TenantTx::begin(&mut client, principal.tenant_id).await?;
        if symbolic.stores_claims() {
            let stored = claim_store::insert(
                &tx,
                principal.key_id,
                id,
                &claim_rows,
                Provenance {
                    extractor: RULE_EXTRACTOR,
                    rule_version: &symbolic.rule_version,
                },
            )
            .await?;
            for claim in extracted {
                CLAIMS_EXTRACTED
                    .with_label_values(&[RULE_EXTRACTOR, claim.polarity.as_str()])
                    .inc();
                tracing::debug!(
                    extractor = RULE_EXTRACTOR,
                    polarity = claim.polarity.as_str(),
                    "symbolic claim extracted"
                );
            }
            tracing::debug!(fragment.id = %id, stored, "symbolic claims stored");
        }
        let mut found = Vec::new();
        if symbolic.detects_conflicts() {
            let key_ids = principal.readable_key_ids();
            let scope = ConflictScope {
                key_ids: &key_ids,
                agent_id: &write.agent_id,
                workspace: write.fragment.workspace.as_deref(),
                exclude: id,
                min_confidence: MIN_CONFLICT_CONFIDENCE,
                limit: i64::try_from(symbolic.max_candidates).unwrap_or(i64::MAX),
            };
            found = claim_store::polarity_conflicts(&tx, &scope, &claim_rows).await?;
        }
        tx.commit().await?;
        Ok(found)
    }

    /// Turns polarity conflicts into response conflicts (one per fragment,
    /// first, with their lexical overlap) and warnings naming the statement.
    fn report(
        &self,
        write: &Write,
        extracted: &[Claim],
        found: Vec<claim_store::PolarityConflict>,
        conflicts: &mut Vec<Conflict>,
        warnings: &mut Vec<String>,
    ) {
        if found.is_empty() {
            return;
        }
        let severity = claims::conflict_severity(found.len());
        WARNINGS
            .with_label_values(&["claim_conflict", severity])
            .inc();
        tracing::info!(
            rule = "claim_conflict",
            severity,
            conflicts = found.len(),
            "symbolic polarity conflict"
        );
        let mine = self.tokenizer.lexemes(&write.fragment.content);
        let mine: HashSet<&str> = mine.iter().map(String::as_str).collect();
        let mut reported: Vec<Conflict> = Vec::new();
        let mut warned = 0;
        for conflict in found {
            let id = conflict.fragment_id.to_string();
            let here = extracted.iter().find(|c| {
                c.subject == conflict.subject
                    && c.predicate == conflict.predicate
                    && c.object == conflict.object
            });
            if let Some(here) = here
                && warned < MAX_REPORTED
            {
                warned += 1;
                warnings.push(format!(
                    "symbolic claim_conflict ({severity}): `{}` is {} here but {} in fragment {id}",
                    here.statement(),
                    here.polarity,
                    conflict.polarity
                ));
            }
            if reported.len() == MAX_REPORTED || reported.iter().any(|c| c.id == id) {
                continue;
            }
            conflicts.retain(|c| c.id != id);
            let theirs = self.tokenizer.lexemes(&conflict.content);
            let theirs: HashSet<&str> = theirs.iter().map(String::as_str).collect();
            let overlap = if mine.is_empty() {
                0.0
            } else {
                mine.intersection(&theirs).count() as f32 / mine.len() as f32
            };
            reported.push(Conflict {
                id,
                content: conflict.content.chars().take(PREVIEW_CHARS).collect(),
                overlap,
            });
        }
        // Explicit contradictions come before mere similarity.
        reported.append(conflicts);
        *conflicts = reported;
    }
}
