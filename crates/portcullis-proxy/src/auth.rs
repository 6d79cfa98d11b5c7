//! Identification: the client's API key → its [`Subject`](portcullis_core::Subject) (E4, L6).

use crate::config::KeyEntry;
use http::{HeaderMap, Request, Uri};
use portcullis_core::{Budget, GatewayCode, LayerKind, Rejection};
use std::collections::HashMap;
use std::sync::Arc;

/// Keys by the keyed hash of their secret: the file's keys, and those of the records
/// database ([`crate::keys::Directory`]) when there is one. The table holds no secret,
/// only digests (HMAC-SHA-256: a lookup's time does not depend on how much of a wrong
/// key matches a right one, and a memory dump shows no key).
#[derive(Clone)]
pub struct KeyTable {
    keys: Arc<HashMap<portcullis_records::Digest, Arc<KeyEntry>>>,
    hasher: portcullis_records::Hasher,
    directory: Option<Arc<crate::keys::Directory>>,
    tasks: Arc<HashMap<String, Task>>,
}

impl Default for KeyTable {
    fn default() -> Self {
        Self::new([], [])
    }
}

/// A task budget and the tenants whose keys may name it (empty = any key).
#[derive(Clone, Debug)]
struct Task {
    budget: Budget,
    owners: Box<[Arc<str>]>,
}

impl Task {
    fn allows(&self, tenant: Option<&str>) -> bool {
        self.owners.is_empty() || tenant.is_some_and(|t| self.owners.iter().any(|o| **o == *t))
    }
}

/// The answer to a task name a key may not use, whether the task is another tenant's or
/// does not exist: the same status, code and message, so names cannot be probed (E4).
fn task_refused() -> Rejection {
    Rejection::new(GatewayCode::Forbidden, LayerKind::Request).with_message(format!(
        "This API key may not use the task named in the {TASK_HEADER} header."
    ))
}

/// The entries (each named by its label), never the secrets they are looked up by.
impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyTable")
            .field("keys", &crate::config::RedactedKeys(&*self.keys))
            .field("tasks", &self.tasks)
            .finish()
    }
}

/// The request header naming a task budget (B3).
pub const TASK_HEADER: &str = "x-portcullis-task";

impl KeyTable {
    /// A table of `keys`, with the task budgets a request may name (shared: any key may
    /// name any of them).
    pub fn new(
        keys: impl IntoIterator<Item = (String, KeyEntry)>,
        tasks: impl IntoIterator<Item = (String, Budget)>,
    ) -> Self {
        Self::with_tasks(keys, tasks.into_iter().map(|(n, b)| (n, b, Vec::new())))
    }

    /// A table of `keys`, with the task budgets a request may name, each with the tenants
    /// whose keys may name it (none = any key).
    pub fn with_tasks(
        keys: impl IntoIterator<Item = (String, KeyEntry)>,
        tasks: impl IntoIterator<Item = (String, Budget, Vec<Arc<str>>)>,
    ) -> Self {
        Self::serving(keys, tasks, None)
    }

    /// A table of `keys` and task budgets that also serves the keys of `directory` (the
    /// records database); all are hashed under the directory's secret, so one digest
    /// per request finds a key of either kind. Without a directory the file's keys are
    /// hashed under a secret of this process's own.
    pub fn serving(
        keys: impl IntoIterator<Item = (String, KeyEntry)>,
        tasks: impl IntoIterator<Item = (String, Budget, Vec<Arc<str>>)>,
        directory: Option<Arc<crate::keys::Directory>>,
    ) -> Self {
        let hasher = directory
            .as_ref()
            .map_or_else(portcullis_records::Hasher::ephemeral, |d| {
                d.hasher().clone()
            });
        Self {
            keys: Arc::new(
                keys.into_iter()
                    .map(|(k, e)| (hasher.digest(&k), Arc::new(e)))
                    .collect(),
            ),
            hasher,
            directory,
            tasks: Arc::new(
                tasks
                    .into_iter()
                    .map(|(n, budget, owners)| {
                        (
                            n,
                            Task {
                                budget,
                                owners: owners.into(),
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }

    /// The entry of a request's key, or 40101.
    pub fn identify(&self, headers: &HeaderMap, uri: &Uri) -> Result<Arc<KeyEntry>, Rejection> {
        client_key(headers, uri)
            .and_then(|k| {
                let digest = self.hasher.digest(k);
                match self.keys.get(&digest) {
                    Some(e) => Some(e.clone()),
                    None => self
                        .directory
                        .as_ref()?
                        .open_key(&digest, crate::keys::now_ms()),
                }
            })
            .ok_or_else(|| Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity))
    }

    /// Puts the key's `Arc<KeyEntry>`, `Subject` and `BillingProfile` (with the task budget
    /// the request names, if any) in the request's extensions.
    pub fn authenticate<B>(&self, mut req: Request<B>) -> Result<Request<B>, Rejection> {
        let entry = self.identify(req.headers(), req.uri())?;
        let mut billing = entry.billing.clone();
        if let Some(task) = req.headers().get(TASK_HEADER) {
            // Another tenant's task and an unknown name answer alike (E4).
            let tenant = entry.subject.tenant.as_deref();
            let task = task
                .to_str()
                .ok()
                .and_then(|t| self.tasks.get(t))
                .filter(|t| t.allows(tenant))
                .ok_or_else(task_refused)?;
            let mut all: Vec<Budget> = billing.budgets.to_vec();
            all.push(task.budget.clone());
            billing.budgets = all.into();
        }
        req.extensions_mut().insert(billing);
        req.extensions_mut()
            .insert(portcullis_core::capacity::TenantWeight(entry.weight));
        req.extensions_mut().insert(entry.subject.clone());
        req.extensions_mut().insert(entry);
        Ok(req)
    }
}

/// The client's key, in whichever place its SDK puts it: `Authorization: Bearer`
/// (OpenAI), `x-api-key` (Anthropic), `x-goog-api-key` or `?key=` (Gemini).
pub fn client_key<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    header("authorization")
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| header("x-api-key"))
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            uri.query()?
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
        })
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4_each_sdk_key_location_is_found() {
        let mut h = HeaderMap::new();
        let u: Uri = "/v1beta/models/m:generateContent?alt=sse&key=g-1"
            .parse()
            .unwrap();
        assert_eq!(client_key(&h, &u), Some("g-1"));
        h.insert("x-goog-api-key", "g-2".parse().unwrap());
        assert_eq!(client_key(&h, &u), Some("g-2"));
        h.insert("x-api-key", "a-1".parse().unwrap());
        assert_eq!(client_key(&h, &u), Some("a-1"));
        h.insert("authorization", "Bearer o-1".parse().unwrap());
        assert_eq!(client_key(&h, &u), Some("o-1"));
        let empty = HeaderMap::new();
        assert_eq!(client_key(&empty, &"/v1/messages".parse().unwrap()), None);
    }
}
