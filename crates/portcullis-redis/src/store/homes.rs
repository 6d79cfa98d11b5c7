//! Object homes on Redis (P6): `<prefix>:home:<object id>`, a string
//! `<channel>\n<model>` with the home's TTL, so every instance sends a request about a
//! provider-side object (a Responses API response, a video job) to the channel that
//! created it. One key per object, on its own Cluster slot; each call is one command.

use crate::client::Client;
use crate::scripts::Effect;
use portcullis_core::Millis;
use portcullis_core::homes::{Home, HomeFuture};
use portcullis_core::store::{StoreError, StoreErrorKind};

/// Object homes: remember, find.
#[derive(Clone)]
pub(crate) struct HomeOps {
    client: Client,
}

impl HomeOps {
    pub(crate) fn new(client: Client) -> Self {
        Self { client }
    }

    /// The key of object `id`'s home.
    pub(crate) fn home_key(&self, id: &str) -> String {
        self.client.keys().home(id)
    }

    /// [`HomeBook::remember`](portcullis_core::homes::HomeBook::remember).
    pub(crate) fn remember(&self, id: &str, home: Home, ttl_ms: Millis) -> HomeFuture<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.home_key(id))
            .arg(format!("{}\n{}", home.channel, home.model))
            .arg("PX")
            .arg(ttl_ms.max(1));
        Box::pin(self.client.write_command(cmd, Effect::FollowsUp))
    }

    /// [`HomeBook::find`](portcullis_core::homes::HomeBook::find).
    pub(crate) fn find(&self, id: &str) -> HomeFuture<Option<Home>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.home_key(id));
        Box::pin(self.client.command(cmd, |v: Option<String>| {
            let Some(v) = v else { return Ok(None) };
            let (channel, model) = v.split_once('\n').ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::Protocol,
                    format!("malformed object home {v:?}"),
                )
            })?;
            Ok(Some(Home {
                channel: channel.into(),
                model: model.into(),
            }))
        }))
    }
}
