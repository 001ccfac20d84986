//! `mneme up`: the gateway, recall, remember (with automatic reflection of
//! sessions) and the embedding worker in one
//! process — the single-machine deployment. The services still talk gRPC
//! over loopback, exactly as separate pods do, but share one database pool,
//! one Redis client and one loaded embedding model.

use std::future::Future;

use mneme_cache::Cache;
use mneme_config::{Config, Secret};
use mneme_consolidator::{Consolidator, EmbeddingWorker};
use mneme_gateway::{App, BackendSettings, Backends};
use mneme_proto::principal::PrincipalSigner;
use mneme_recall::RecallServer;
use mneme_remember::RememberServer;
use mneme_store::Store;
use rand::Rng;
use rand::distr::Alphanumeric;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The sockets `mneme up` serves on (bound by the caller, so tests can use
/// port 0).
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
    pub recall: TcpListener,
    pub remember: TcpListener,
}

impl Listeners {
    /// Binds the addresses of the configuration.
    pub async fn bind(config: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            http: TcpListener::bind(config.gateway.http_addr).await?,
            recall: TcpListener::bind(config.recall.grpc_addr).await?,
            remember: TcpListener::bind(config.remember.grpc_addr).await?,
        })
    }
}

/// Where `mneme up` keeps its internal token when none is configured.
const INTERNAL_TOKEN_FILE: &str = "internal-token";

fn random_token() -> Secret {
    Secret::new(
        rand::rng()
            .sample_iter(Alphanumeric)
            .take(48)
            .map(char::from)
            .collect::<String>(),
    )
}

/// The internal token of a single-process mneme without a configured one.
/// The backends are only reachable from this process, so any secret will
/// do for them; but session ids and OAuth access tokens are keyed by it
/// too, so it is kept in `data_dir` (mode 0600) and survives restarts:
/// otherwise every restart would end every client's MCP session and every
/// connector's access token. Without a writable `data_dir` it lives as
/// long as the process, with a warning.
pub(crate) fn kept_internal_token(data_dir: &std::path::Path) -> Secret {
    let path = data_dir.join(INTERNAL_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(kept) if kept.trim().len() >= 32 => return Secret::new(kept.trim().to_owned()),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the kept internal token is too short; making a new one")
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "cannot read the kept internal token; making a new one")
        }
    }
    let token = random_token();
    let written = std::fs::create_dir_all(data_dir).and_then(|()| {
        use std::io::Write as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&path)?.write_all(token.expose().as_bytes())
    });
    if let Err(error) = written {
        tracing::warn!(
            %error,
            path = %path.display(),
            "cannot keep the internal token: MCP sessions and OAuth access tokens will end at \
             every restart (set MNEME_INTERNAL_TOKEN or a writable MNEME_DATA_DIR)"
        );
    }
    token
}

/// Runs every service until `shutdown` completes or one of them fails; then
/// stops the others and waits for them.
pub async fn up(
    mut config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let token = match config.internal_token.clone() {
        Some(token) => token,
        None => kept_internal_token(&config.data_dir),
    };
    config.gateway.recall_urls = vec![format!("http://{}", listeners.recall.local_addr()?)];
    config.gateway.remember_urls = vec![format!("http://{}", listeners.remember.local_addr()?)];
    let signer = PrincipalSigner::new(token.expose());

    let store = Store::open(&config).await?;
    let cache = Cache::from_config(&config.redis).await?;
    let embedder = mneme_embed::from_config(&config.embedding)?;

    let stop = CancellationToken::new();
    let mut tasks: JoinSet<(&'static str, anyhow::Result<()>)> = JoinSet::new();

    let recall = RecallServer::new(
        store.clone(),
        cache.clone(),
        embedder.clone(),
        config.recall.clone(),
    )
    .with_passage_recipe(mneme_embed::PassageRecipe::from_config(&config.embedding));
    let (signer_for_recall, stopped) = (signer.clone(), stop.clone().cancelled_owned());
    tasks.spawn(async move {
        (
            "recall",
            mneme_recall::serve(recall, signer_for_recall, listeners.recall, stopped).await,
        )
    });

    let remember = RememberServer::new(store.clone(), cache.clone(), config.remember.clone())
        .with_consolidation(config.consolidation.clone());
    if config.auto_reflect.enabled {
        let reflector = mneme_remember::auto_reflect::SessionReflector::new(
            remember.clone(),
            config.auto_reflect.clone(),
        );
        let reflector_stop = stop.clone();
        tasks.spawn(async move {
            reflector.run(reflector_stop).await;
            ("automatic reflection", Ok(()))
        });
    }
    let (signer_for_remember, stopped) = (signer.clone(), stop.clone().cancelled_owned());
    tasks.spawn(async move {
        (
            "remember",
            mneme_remember::serve(remember, signer_for_remember, listeners.remember, stopped).await,
        )
    });

    let worker = EmbeddingWorker::from_config(store.clone(), embedder, &config.embedding)
        .with_cache(cache.clone());
    let (sweep, worker_stop) = (config.embedding.worker_sweep_interval, stop.clone());
    tasks.spawn(async move {
        worker.run(sweep, worker_stop).await;
        ("embedding worker", Ok(()))
    });

    if config.consolidation.enabled {
        let consolidator = Consolidator::new(store.clone(), config.consolidation.clone());
        let consolidation_stop = stop.clone();
        tasks.spawn(async move {
            consolidator.run(consolidation_stop).await;
            ("consolidation", Ok(()))
        });
    }

    let backends = Backends::new(&BackendSettings::from_config(&config.gateway), signer)?;
    let gateway_stop = stop.clone().cancelled_owned();
    tasks.spawn(async move {
        let result = match App::new(store, cache, backends, &config, token.expose()) {
            Ok(app) => mneme_gateway::serve(app, &config, listeners.http, gateway_stop).await,
            Err(error) => Err(error),
        };
        ("gateway", result)
    });

    // Services run until told to stop: any of them ending first is a failure.
    let mut failure = tokio::select! {
        () = shutdown => None,
        Some(joined) = tasks.join_next() => Some(
            failure_of(joined).unwrap_or_else(|| anyhow::anyhow!("a service stopped unexpectedly")),
        ),
    };
    stop.cancel();
    while let Some(joined) = tasks.join_next().await {
        if let Some(error) = failure_of(joined) {
            failure.get_or_insert(error);
        }
    }
    failure.map_or(Ok(()), Err)
}

type Joined = Result<(&'static str, anyhow::Result<()>), tokio::task::JoinError>;

/// The error of a finished service task, if it failed.
fn failure_of(joined: Joined) -> Option<anyhow::Error> {
    match joined {
        Ok((_, Ok(()))) => None,
        Ok((name, Err(error))) => Some(error.context(format!("the {name} stopped"))),
        Err(error) => Some(anyhow::anyhow!("a service task panicked: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_internal_token_is_kept_across_restarts_and_readable_only_by_its_owner() {
        let dir = std::env::temp_dir().join(format!("mneme-up-{}", random_token().expose()));
        let first = kept_internal_token(&dir);
        assert_eq!(
            kept_internal_token(&dir).expose(),
            first.expose(),
            "a restart reads the same token"
        );
        let path = dir.join(INTERNAL_TOKEN_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A damaged file is replaced, not trusted.
        std::fs::write(&path, "short").unwrap();
        let replaced = kept_internal_token(&dir);
        assert_ne!(replaced.expose(), "short");
        assert_eq!(replaced.expose().len(), 48);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
