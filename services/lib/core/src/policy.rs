//! The symbolic layer's policy rules: pure checks of a fragment about to be
//! written, each returning a violation an agent can act on.
//!
//! The rules (reference `PolicyRules`, rule version `v1`):
//! 1. `decision_has_rationale`: a decision says why (a rationale word such
//!    as *because* / *때문*), or links to at least two fragments that do;
//! 2. `error_has_resolution_path`: an error names a cause or fix, or carries
//!    a resolution status;
//! 3. `procedure_has_step_markers`: a procedure has steps (`1.`, `-`,
//!    *first/then*, *먼저/다음*, `→`);
//! 4. `case_id_has_resolution_status`: a fragment filed under a case says
//!    where the case stands.
//!
//! The reference's fifth rule (an assertion both verified and rejected)
//! cannot be violated here: `assertion_status` holds one value.
//!
//! Where the result goes is the caller's choice: the soft gate returns the
//! violations as warnings, the hard gate refuses the write.

use std::sync::LazyLock;

use regex::Regex;

use crate::FragmentType;

/// The version of these rules, recorded with what they produce.
pub const RULE_VERSION: &str = "v1";
/// Links that stand in for a stated rationale.
const RATIONALE_LINKS: usize = 2;

static RATIONALE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(because|since|due to|so that|in order to|therefore|given that|reason|rationale|why|trade-?off)\b|때문|이유|위해|위하여|따라서|근거|므로|니까|덕분",
    )
    .expect("valid regex")
});

static CAUSE_OR_FIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(caused?|causes|root cause|because|due to|fix|fixed|fixes|fixing|resolved?|resolves|solution|solved|workaround|patch(ed)?|mitigat\w*)\b|원인|해결|수정|고침|고쳤|조치|때문|우회",
    )
    .expect("valid regex")
});

static STEP_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?im)(^\s*(\d+[.)]|[-*•])\s)|\b(step\s*\d+|first(ly)?|then|next|finally|afterwards)\b|\d+\)|단계|먼저|다음|그 ?후|마지막|→|->",
    )
    .expect("valid regex")
});

/// What the rules look at.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    pub fragment_type: FragmentType,
    pub content: &'a str,
    /// Fragments the write asks to link to.
    pub linked_to: usize,
    pub case_id: Option<&'a str>,
    pub resolution_status: Option<&'a str>,
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    /// `low` or `medium`; none of the rules is severe on its own.
    pub severity: &'static str,
    /// What to change, addressed to the agent.
    pub detail: &'static str,
}

impl Violation {
    /// `rule: detail`, for warnings and error messages.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.rule, self.detail)
    }
}

/// Every rule `input` breaks, in rule order.
pub fn check(input: &PolicyInput<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    match input.fragment_type {
        FragmentType::Decision
            if input.linked_to < RATIONALE_LINKS && !RATIONALE.is_match(input.content) =>
        {
            violations.push(Violation {
                rule: "decision_has_rationale",
                severity: "medium",
                detail: "a decision should say why it was taken (because …), or link to the \
                         fragments that explain it",
            });
        }
        FragmentType::Error
            if input.resolution_status.is_none() && !CAUSE_OR_FIX.is_match(input.content) =>
        {
            violations.push(Violation {
                rule: "error_has_resolution_path",
                severity: "medium",
                detail: "an error should name its cause or fix, or carry a resolutionStatus",
            });
        }
        FragmentType::Procedure if !STEP_MARKER.is_match(input.content) => {
            violations.push(Violation {
                rule: "procedure_has_step_markers",
                severity: "low",
                detail: "a procedure should list its steps (1. … 2. …, first … then …)",
            });
        }
        _ => {}
    }
    if input.case_id.is_some() && input.resolution_status.is_none() {
        violations.push(Violation {
            rule: "case_id_has_resolution_status",
            severity: "low",
            detail: "a fragment filed under a caseId should carry a resolutionStatus \
                     (open, resolved or abandoned)",
        });
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(fragment_type: FragmentType, content: &str) -> PolicyInput<'_> {
        PolicyInput {
            fragment_type,
            content,
            linked_to: 0,
            case_id: None,
            resolution_status: None,
        }
    }

    fn rules(input: &PolicyInput<'_>) -> Vec<&'static str> {
        check(input).into_iter().map(|v| v.rule).collect()
    }

    #[test]
    fn decisions_need_a_rationale_or_links() {
        let bare = input(FragmentType::Decision, "We use Postgres for queues");
        assert_eq!(rules(&bare), vec!["decision_has_rationale"]);
        let reasoned = input(
            FragmentType::Decision,
            "We use Postgres for queues because it is already deployed",
        );
        assert!(rules(&reasoned).is_empty());
        let korean = input(
            FragmentType::Decision,
            "운영 부담 때문에 큐는 Postgres로 한다",
        );
        assert!(rules(&korean).is_empty());
        let linked = PolicyInput {
            linked_to: 2,
            ..bare
        };
        assert!(rules(&linked).is_empty());
    }

    #[test]
    fn errors_need_a_cause_fix_or_status() {
        let bare = input(FragmentType::Error, "Deploy failed with exit code 137");
        assert_eq!(rules(&bare), vec!["error_has_resolution_path"]);
        assert!(
            rules(&input(
                FragmentType::Error,
                "Deploy failed with exit 137, caused by the memory limit"
            ))
            .is_empty()
        );
        assert!(rules(&input(FragmentType::Error, "배포 실패: 메모리 제한이 원인")).is_empty());
        let with_status = PolicyInput {
            resolution_status: Some("open"),
            ..bare
        };
        assert!(rules(&with_status).is_empty());
    }

    #[test]
    fn procedures_need_steps() {
        assert_eq!(
            rules(&input(FragmentType::Procedure, "Restart the worker")),
            vec!["procedure_has_step_markers"]
        );
        for content in [
            "1. drain the node 2. restart the worker",
            "First drain the node, then restart the worker",
            "- drain\n- restart",
            "먼저 노드를 비우고 다음에 재시작한다",
            "drain → restart",
        ] {
            assert!(
                rules(&input(FragmentType::Procedure, content)).is_empty(),
                "{content}"
            );
        }
    }

    #[test]
    fn cases_need_a_resolution_status_and_facts_pass() {
        let in_case = PolicyInput {
            case_id: Some("case-1"),
            ..input(FragmentType::Fact, "The cluster has three nodes")
        };
        assert_eq!(rules(&in_case), vec!["case_id_has_resolution_status"]);
        assert!(rules(&input(FragmentType::Fact, "The cluster has three nodes")).is_empty());
        let violation = &check(&in_case)[0];
        assert!(
            violation
                .describe()
                .starts_with("case_id_has_resolution_status: ")
        );
    }
}
