//! Messages for a connection held by another process: each process
//! subscribes to the channels of the connections it holds, and whoever
//! receives a message for one of them publishes it there. Used by the
//! gateway's legacy SSE transport, whose stream lives on one pod while its
//! `POST /message` requests may land on any pod.

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use tokio::sync::broadcast;

use crate::{CONNECT_WAIT, Cache, CacheError, builder};

/// A process's subscription to the channels of its connections.
pub struct Relay {
    subscriber: SubscriberClient,
    prefix: String,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").finish_non_exhaustive()
    }
}

/// One relayed message: the connection it is for and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    pub connection: String,
    pub payload: String,
}

impl Cache {
    fn relay_channel(&self, connection: &str) -> String {
        self.key(&["relay", connection])
    }

    /// Starts this process's relay subscriber (it reconnects and
    /// resubscribes on its own).
    pub async fn relay(&self) -> Result<Relay, CacheError> {
        let subscriber = builder(&self.config).build_subscriber_client()?;
        subscriber.connect();
        let _ = tokio::time::timeout(CONNECT_WAIT, subscriber.wait_for_connect()).await;
        let _resubscribe = subscriber.manage_subscriptions();
        Ok(Relay {
            subscriber,
            prefix: self.relay_channel(""),
        })
    }

    /// Publishes `payload` for `connection`; the number of processes that
    /// received it (0: no process holds the connection).
    pub async fn relay_to(&self, connection: &str, payload: &str) -> Result<i64, CacheError> {
        Ok(self
            .live()?
            .publish(self.relay_channel(connection), payload)
            .await?)
    }
}

impl Relay {
    pub async fn subscribe(&self, connection: &str) -> Result<(), CacheError> {
        let channel = format!("{}{connection}", self.prefix);
        Ok(self.subscriber.subscribe(channel).await?)
    }

    pub async fn unsubscribe(&self, connection: &str) {
        let channel = format!("{}{connection}", self.prefix);
        if let Err(error) = self.subscriber.unsubscribe(channel).await {
            tracing::debug!(%error, "relay unsubscribe failed");
        }
    }

    /// The messages of every subscribed connection.
    pub fn messages(&self) -> RelayMessages {
        RelayMessages {
            messages: self.subscriber.message_rx(),
            prefix: self.prefix.clone(),
        }
    }
}

/// Receives relayed messages.
pub struct RelayMessages {
    messages: broadcast::Receiver<Message>,
    prefix: String,
}

impl std::fmt::Debug for RelayMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayMessages").finish_non_exhaustive()
    }
}

impl RelayMessages {
    /// The next message; `None` once the subscriber is gone for good.
    pub async fn recv(&mut self) -> Option<Relayed> {
        loop {
            match self.messages.recv().await {
                Ok(message) => {
                    let connection = message.channel.strip_prefix(self.prefix.as_str());
                    if let (Some(connection), Some(payload)) =
                        (connection, message.value.as_string())
                    {
                        return Some(Relayed {
                            connection: connection.to_owned(),
                            payload,
                        });
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "relayed messages dropped: receiver too slow");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
