//! How a layer finds the subject of a request (L6).

use http::{HeaderName, Request};
use portcullis_core::{GatewayCode, LayerKind, Policy, Rejection, Subject};
use std::sync::Arc;

/// Finds whom a request is limited as.
///
/// Implemented by [`FromExtensions`] (the default), [`HeaderKey`], and any
/// `Fn(&Request<B>) -> Result<Subject, Rejection>` closure.
pub trait SubjectExtractor<B>: Clone + Send + Sync + 'static {
    /// The request's subject, or the rejection to answer with.
    fn extract(&self, req: &Request<B>) -> Result<Subject, Rejection>;
}

impl<B, F> SubjectExtractor<B> for F
where
    F: Fn(&Request<B>) -> Result<Subject, Rejection> + Clone + Send + Sync + 'static,
{
    fn extract(&self, req: &Request<B>) -> Result<Subject, Rejection> {
        self(req)
    }
}

fn unauthenticated() -> Rejection {
    Rejection::new(GatewayCode::Unauthenticated, LayerKind::Identity)
}

/// Reads the [`Subject`] an earlier layer (authentication) put in the request's
/// extensions. A request without one is refused with 40101.
#[derive(Clone, Copy, Debug, Default)]
pub struct FromExtensions;

impl<B> SubjectExtractor<B> for FromExtensions {
    fn extract(&self, req: &Request<B>) -> Result<Subject, Rejection> {
        req.extensions()
            .get::<Subject>()
            .cloned()
            .ok_or_else(unauthenticated)
    }
}

/// Limits by the value of a header (for example a tenant id or an API key), with one
/// policy for every key. `Authorization: Bearer` prefixes are stripped. A missing or
/// empty header is refused with 40101.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    header: HeaderName,
    policy: Option<Arc<Policy>>,
}

impl HeaderKey {
    /// Keys requests by `header` with no policy (set one with [`HeaderKey::policy`]).
    pub fn new(header: HeaderName) -> Self {
        Self {
            header,
            policy: None,
        }
    }
    /// The policy every key gets.
    pub fn policy(mut self, p: impl Into<Arc<Policy>>) -> Self {
        self.policy = Some(p.into());
        self
    }
}

impl<B> SubjectExtractor<B> for HeaderKey {
    fn extract(&self, req: &Request<B>) -> Result<Subject, Rejection> {
        if let Some(s) = req.extensions().get::<Subject>() {
            return Ok(s.clone());
        }
        let v = req
            .headers()
            .get(&self.header)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(v).trim())
            .filter(|v| !v.is_empty())
            .ok_or_else(unauthenticated)?;
        let mut s = Subject::new(v);
        s.policy = self.policy.clone();
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_subject_is_40101_not_a_panic() {
        let req = Request::new(());
        let e = FromExtensions.extract(&req).unwrap_err();
        assert_eq!(e.code(), GatewayCode::Unauthenticated);
        assert_eq!(e.http_status(), 401);
    }

    #[test]
    fn l6_header_key_strips_bearer() {
        let x = HeaderKey::new(http::header::AUTHORIZATION)
            .policy(Policy::default().with_concurrency(2));
        let req = Request::builder()
            .header("authorization", "Bearer sk-abc")
            .body(())
            .unwrap();
        let s = x.extract(&req).unwrap();
        assert_eq!(s.key.as_str(), "sk-abc");
        assert_eq!(s.policy.unwrap().concurrency, 2);
        let empty = Request::builder()
            .header("authorization", "Bearer ")
            .body(())
            .unwrap();
        assert!(x.extract(&empty).is_err());
    }

    #[test]
    fn l6_closure_extractor() {
        let x = |r: &Request<()>| Ok(Subject::new(r.uri().path()));
        let req = Request::builder().uri("/tenant-a").body(()).unwrap();
        assert_eq!(
            SubjectExtractor::extract(&x, &req).unwrap().key.as_str(),
            "/tenant-a"
        );
    }
}
