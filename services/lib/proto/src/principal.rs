//! The caller's principal in gRPC metadata, signed with the internal token.
//!
//! The gateway authenticates clients and attaches a [`v1::SignedPrincipal`] to
//! every backend call ([`PrincipalSigner::attach`]); backends verify it in an
//! interceptor ([`PrincipalSigner`] implements
//! [`tonic::service::Interceptor`]) and refuse calls without a valid one. A
//! signature expires after [`SIGNATURE_TTL`], which bounds replay of a
//! captured header.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use mneme_core::{Error, Permission, Principal};
use prost::Message;
use sha2::Sha256;
use tonic::metadata::{MetadataMap, MetadataValue};
use uuid::Uuid;

use crate::error::to_status;
use crate::v1;

/// Metadata entry carrying the [`v1::SignedPrincipal`].
pub const PRINCIPAL_METADATA: &str = "x-mneme-principal-bin";
/// How long a signature stays valid. Covers clock skew between pods and the
/// longest backend deadline.
pub const SIGNATURE_TTL: Duration = Duration::from_secs(120);

type HmacSha256 = Hmac<Sha256>;

/// Signs and verifies principals with the deployment's internal token.
#[derive(Clone)]
pub struct PrincipalSigner {
    key: Arc<[u8]>,
}

impl std::fmt::Debug for PrincipalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrincipalSigner([redacted])")
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl PrincipalSigner {
    pub fn new(internal_token: &str) -> Self {
        Self {
            key: internal_token.as_bytes().into(),
        }
    }

    fn mac(&self, principal: &[u8], expires_at: i64) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(principal);
        mac.update(&expires_at.to_be_bytes());
        mac
    }

    /// Adds the signed principal to an outgoing request.
    pub fn attach<T>(&self, request: &mut tonic::Request<T>, principal: &Principal) {
        let encoded = to_proto(principal).encode_to_vec();
        let expires_at = now_ms() + SIGNATURE_TTL.as_millis() as i64;
        let mac = self
            .mac(&encoded, expires_at)
            .finalize()
            .into_bytes()
            .to_vec();
        let signed = v1::SignedPrincipal {
            principal: encoded,
            expires_at_unix_ms: expires_at,
            mac,
        };
        request.metadata_mut().insert_bin(
            PRINCIPAL_METADATA,
            MetadataValue::from_bytes(&signed.encode_to_vec()),
        );
    }

    /// Verifies the signed principal of an incoming request.
    pub fn verify(&self, metadata: &MetadataMap) -> Result<Principal, Error> {
        let unauthenticated = || Error::unauthenticated("missing or invalid caller principal");
        let bytes = metadata
            .get_bin(PRINCIPAL_METADATA)
            .and_then(|value| value.to_bytes().ok())
            .ok_or_else(unauthenticated)?;
        let signed = v1::SignedPrincipal::decode(bytes.as_ref()).map_err(|_| unauthenticated())?;
        self.mac(&signed.principal, signed.expires_at_unix_ms)
            .verify_slice(&signed.mac)
            .map_err(|_| unauthenticated())?;
        if signed.expires_at_unix_ms < now_ms() {
            return Err(Error::unauthenticated("caller principal expired"));
        }
        let principal =
            v1::Principal::decode(signed.principal.as_slice()).map_err(|_| unauthenticated())?;
        from_proto(principal).ok_or_else(unauthenticated)
    }
}

/// Server side: verifies the principal and stores it in the request
/// extensions for [`principal`].
impl tonic::service::Interceptor for PrincipalSigner {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let principal = self.verify(request.metadata()).map_err(to_status)?;
        request.extensions_mut().insert(principal);
        Ok(request)
    }
}

/// The verified principal of a request that passed the interceptor.
pub fn principal<T>(request: &tonic::Request<T>) -> Result<Principal, tonic::Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| to_status(Error::unauthenticated("missing caller principal")))
}

fn permission_to_proto(permission: Permission) -> v1::Permission {
    match permission {
        Permission::Read => v1::Permission::Read,
        Permission::Write => v1::Permission::Write,
        Permission::Admin => v1::Permission::Admin,
    }
}

fn to_proto(principal: &Principal) -> v1::Principal {
    v1::Principal {
        tenant_id: principal.tenant_id.to_string(),
        key_id: principal.key_id.to_string(),
        group_key_ids: principal
            .group_key_ids
            .iter()
            .map(Uuid::to_string)
            .collect(),
        user_id: principal.user_id.map(|id| id.to_string()),
        permissions: principal
            .permissions
            .iter()
            .map(|p| permission_to_proto(*p) as i32)
            .collect(),
        workspace: principal.workspace.clone(),
        mode: principal.mode.clone(),
        session_id: principal.session_id.clone(),
        agent_id: principal.agent_id.clone(),
    }
}

fn from_proto(principal: v1::Principal) -> Option<Principal> {
    let permissions = principal
        .permissions
        .iter()
        .map(|p| match v1::Permission::try_from(*p).ok()? {
            v1::Permission::Read => Some(Permission::Read),
            v1::Permission::Write => Some(Permission::Write),
            v1::Permission::Admin => Some(Permission::Admin),
            v1::Permission::Unspecified => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Principal {
        tenant_id: principal.tenant_id.parse().ok()?,
        key_id: principal.key_id.parse().ok()?,
        group_key_ids: principal
            .group_key_ids
            .iter()
            .map(|id| id.parse().ok())
            .collect::<Option<Vec<_>>>()?,
        user_id: match principal.user_id {
            Some(id) => Some(id.parse().ok()?),
            None => None,
        },
        permissions,
        workspace: principal.workspace,
        mode: principal.mode,
        session_id: principal.session_id,
        agent_id: principal.agent_id,
    })
}

#[cfg(test)]
mod tests {
    use mneme_core::ErrorCode;
    use mneme_core::principal::DEFAULT_AGENT_ID;

    use super::*;

    fn sample() -> Principal {
        Principal {
            tenant_id: Uuid::new_v4(),
            key_id: Uuid::new_v4(),
            group_key_ids: vec![Uuid::new_v4()],
            user_id: None,
            permissions: vec![Permission::Read, Permission::Write],
            workspace: Some("docs".into()),
            mode: None,
            session_id: Some("s-1".into()),
            agent_id: DEFAULT_AGENT_ID.into(),
        }
    }

    #[test]
    fn signed_principals_round_trip() {
        let signer = PrincipalSigner::new("0123456789abcdef0123456789abcdef");
        let mut request = tonic::Request::new(());
        signer.attach(&mut request, &sample());
        let verified = signer.verify(request.metadata()).unwrap();
        assert_eq!(verified.permissions, sample().permissions);
        assert_eq!(verified.workspace.as_deref(), Some("docs"));
    }

    #[test]
    fn other_tokens_missing_headers_and_tampering_are_refused() {
        let signer = PrincipalSigner::new("0123456789abcdef0123456789abcdef");
        let mut request = tonic::Request::new(());
        signer.attach(&mut request, &sample());
        let stranger = PrincipalSigner::new("fedcba9876543210fedcba9876543210");
        assert_eq!(
            stranger.verify(request.metadata()).unwrap_err().code,
            ErrorCode::Unauthenticated
        );
        assert!(signer.verify(&MetadataMap::new()).is_err());

        // Swap in another tenant's principal under the original signature.
        let bytes = request
            .metadata()
            .get_bin(PRINCIPAL_METADATA)
            .unwrap()
            .to_bytes()
            .unwrap();
        let mut signed = v1::SignedPrincipal::decode(bytes.as_ref()).unwrap();
        let mut forged = sample();
        forged.tenant_id = Uuid::new_v4();
        signed.principal = to_proto(&forged).encode_to_vec();
        let mut tampered = MetadataMap::new();
        tampered.insert_bin(
            PRINCIPAL_METADATA,
            MetadataValue::from_bytes(&signed.encode_to_vec()),
        );
        assert!(signer.verify(&tampered).is_err());
    }

    #[test]
    fn expired_signatures_are_refused() {
        let signer = PrincipalSigner::new("0123456789abcdef0123456789abcdef");
        let encoded = to_proto(&sample()).encode_to_vec();
        let expires_at = now_ms() - 1;
        let signed = v1::SignedPrincipal {
            mac: signer
                .mac(&encoded, expires_at)
                .finalize()
                .into_bytes()
                .to_vec(),
            principal: encoded,
            expires_at_unix_ms: expires_at,
        };
        let mut metadata = MetadataMap::new();
        metadata.insert_bin(
            PRINCIPAL_METADATA,
            MetadataValue::from_bytes(&signed.encode_to_vec()),
        );
        assert_eq!(
            signer.verify(&metadata).unwrap_err().message,
            "caller principal expired"
        );
    }
}
