//! Dashboard sessions of the admin API: `adm:<hash of the cookie>` holds
//! who signed in (JSON), with a sliding expiry. Failures are reported: a
//! sign-in without Redis must fail rather than hand out a cookie that no
//! pod can verify.

use std::time::Duration;

use fred::prelude::*;

use crate::{Cache, CacheError};

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Cache {
    pub async fn put_admin_session(
        &self,
        token_hash: &str,
        session: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.live()?
            .set::<(), _, _>(
                self.key(&["adm", token_hash]),
                session,
                Some(Expiration::PX(millis(ttl))),
                None,
                false,
            )
            .await?;
        Ok(())
    }

    /// The session, extending it by `ttl` when it exists.
    pub async fn admin_session(
        &self,
        token_hash: &str,
        ttl: Duration,
    ) -> Result<Option<String>, CacheError> {
        let key = self.key(&["adm", token_hash]);
        let session: Option<String> = self.live()?.get(&key).await?;
        if session.is_some() {
            let _: () = self.live()?.pexpire(&key, millis(ttl), None).await?;
        }
        Ok(session)
    }

    pub async fn delete_admin_session(&self, token_hash: &str) -> Result<(), CacheError> {
        self.live()?
            .del::<(), _>(self.key(&["adm", token_hash]))
            .await?;
        Ok(())
    }
}
