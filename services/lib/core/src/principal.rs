//! Who is calling: the principal the gateway resolves from credentials.
//!
//! A principal is never built from tool arguments. The gateway resolves it
//! from an API key (later: an OAuth token), signs it, and sends it to the
//! backends in gRPC metadata; backends trust nothing else.

use uuid::Uuid;

use crate::error::{Error, Result};

/// A permission an API key can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    Read,
    Write,
    Admin,
}

impl Permission {
    pub const ALL: [Permission; 3] = [Permission::Read, Permission::Write, Permission::Admin];

    pub const fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "unknown permission `{name}` (expected read, write or admin)"
                ))
            })
    }

    /// Parses a comma-separated list such as `read,write`.
    pub fn parse_list(list: &str) -> Result<Vec<Self>> {
        let mut permissions = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Self::parse)
            .collect::<Result<Vec<_>>>()?;
        permissions.sort();
        permissions.dedup();
        if permissions.is_empty() {
            return Err(Error::invalid_argument(
                "at least one permission is required",
            ));
        }
        Ok(permissions)
    }
}

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: Uuid,
    /// The API key the request was authenticated with; writes are stamped with it.
    pub key_id: Uuid,
    /// Keys sharing a key group with `key_id`; their fragments are readable too.
    pub group_key_ids: Vec<Uuid>,
    pub user_id: Option<Uuid>,
    pub permissions: Vec<Permission>,
    /// The key's default workspace, used when a request names none.
    pub workspace: Option<String>,
    pub mode: Option<String>,
    pub session_id: Option<String>,
    pub agent_id: String,
}

/// The agent id used when a request names none; every agent also sees it.
pub const DEFAULT_AGENT_ID: &str = "default";

impl Principal {
    /// Whether the principal holds `permission`. `admin` implies every other
    /// permission; `write` does not imply `read`.
    pub fn has(&self, permission: Permission) -> bool {
        self.permissions.contains(&permission) || self.permissions.contains(&Permission::Admin)
    }

    /// Fails with `PermissionDenied` unless the principal holds `permission`.
    pub fn require(&self, permission: Permission) -> Result<()> {
        if self.has(permission) {
            Ok(())
        } else {
            Err(Error::permission_denied(format!(
                "this API key lacks the `{}` permission",
                permission.as_str()
            )))
        }
    }

    /// The keys whose fragments this principal may read: its own and its
    /// groups' (deduplicated, own key first).
    pub fn readable_key_ids(&self) -> Vec<Uuid> {
        let mut keys = Vec::with_capacity(1 + self.group_key_ids.len());
        keys.push(self.key_id);
        for key in &self.group_key_ids {
            if !keys.contains(key) {
                keys.push(*key);
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(permissions: Vec<Permission>) -> Principal {
        Principal {
            tenant_id: Uuid::new_v4(),
            key_id: Uuid::new_v4(),
            group_key_ids: vec![],
            user_id: None,
            permissions,
            workspace: None,
            mode: None,
            session_id: None,
            agent_id: DEFAULT_AGENT_ID.into(),
        }
    }

    #[test]
    fn write_does_not_imply_read_but_admin_implies_all() {
        let writer = principal(vec![Permission::Write]);
        assert!(writer.require(Permission::Write).is_ok());
        assert!(writer.require(Permission::Read).is_err());
        let admin = principal(vec![Permission::Admin]);
        assert!(Permission::ALL.iter().all(|p| admin.has(*p)));
    }

    #[test]
    fn permission_lists_parse_strictly() {
        assert_eq!(
            Permission::parse_list("write, read,read").unwrap(),
            vec![Permission::Read, Permission::Write]
        );
        assert!(Permission::parse_list("read,owner").is_err());
        assert!(Permission::parse_list(" , ").is_err());
    }

    #[test]
    fn readable_keys_include_groups_once() {
        let mut p = principal(vec![Permission::Read]);
        let other = Uuid::new_v4();
        p.group_key_ids = vec![other, p.key_id, other];
        assert_eq!(p.readable_key_ids(), vec![p.key_id, other]);
    }
}

/// The agent a request acts for: the requested one when given (validated),
/// else the principal's.
pub fn resolve_agent_id(requested: Option<&str>, principal: &Principal) -> Result<String> {
    let Some(agent) = requested.map(str::trim).filter(|a| !a.is_empty()) else {
        return Ok(principal.agent_id.clone());
    };
    let valid = agent.len() <= 64
        && agent
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if valid {
        Ok(agent.to_owned())
    } else {
        Err(Error::invalid_argument(
            "agentId must be 1-64 characters of letters, digits, `_`, `-`, `.` or `:`",
        ))
    }
}

#[cfg(test)]
mod agent_tests {
    use super::*;

    #[test]
    fn agent_ids_default_to_the_principal_and_are_validated() {
        let principal = Principal {
            tenant_id: Uuid::nil(),
            key_id: Uuid::nil(),
            group_key_ids: vec![],
            user_id: None,
            permissions: vec![],
            workspace: None,
            mode: None,
            session_id: None,
            agent_id: "default".into(),
        };
        assert_eq!(resolve_agent_id(None, &principal).unwrap(), "default");
        assert_eq!(resolve_agent_id(Some(" "), &principal).unwrap(), "default");
        assert_eq!(
            resolve_agent_id(Some("coder-1"), &principal).unwrap(),
            "coder-1"
        );
        assert!(resolve_agent_id(Some("a b"), &principal).is_err());
    }
}
