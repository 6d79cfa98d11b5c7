//! Secrets and their keyed hashes.
//!
//! A client key's secret (and a management token's) is generated here, shown once, and
//! stored only as its HMAC-SHA-256 under the server-side hash secret: a copy of the
//! database holds nothing a client could present, and without the hash secret nothing to
//! test guesses against. Lookups go by the digest (so no comparison runs over the
//! secret), and the digest found is compared again in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use subtle::ConstantTimeEq;

/// The HMAC-SHA-256 of a secret.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Lower-case hex, as the database keeps it.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// From the database's hex; `None` if it is not 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in b.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Self(out))
    }

    /// Equality in constant time.
    pub fn matches(&self, other: &Digest) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

/// A digest names no secret, but it is still not printed whole.
impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({}…)", &self.to_hex()[..8])
    }
}

/// The keyed hash: HMAC-SHA-256 under the server-side secret, its key schedule computed
/// once (each hash clones the keyed state).
#[derive(Clone)]
pub struct Hasher {
    mac: Hmac<Sha256>,
}

impl Hasher {
    /// A hasher under `secret` (at least 16 bytes).
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < 16 {
            return Err(format!(
                "the key hash secret is {} bytes: at least 16 are needed",
                secret.len()
            ));
        }
        let mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| e.to_string())?;
        Ok(Self { mac })
    }

    /// A hasher under a fresh random secret: for keys that never leave this process
    /// (the configuration file's), whose digests need to match nothing else.
    pub fn ephemeral() -> Self {
        Self::new(&random::<32>()).expect("32 bytes are enough")
    }

    /// The digest of `secret`.
    pub fn digest(&self, secret: &str) -> Digest {
        let mut mac = self.mac.clone();
        mac.update(secret.as_bytes());
        Digest(mac.finalize().into_bytes().into())
    }
}

impl fmt::Debug for Hasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hasher(<redacted>)")
    }
}

/// A secret just generated, to be shown once. Its `Debug` shows nothing of it.
pub struct Secret(String);

impl Secret {
    /// A new client key secret: `sk-pcx-` and 48 hex digits (192 random bits).
    pub fn new_key() -> Self {
        Self(format!("sk-pcx-{}", hex(&random::<24>())))
    }

    /// A new management token: `pcx-mt-` and 48 hex digits.
    pub fn new_token() -> Self {
        Self(format!("pcx-mt-{}", hex(&random::<24>())))
    }

    /// The secret itself, for the one answer that shows it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A record id: `prefix` and 20 hex digits (80 random bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", hex(&random::<10>()))
}

/// `N` bytes from the operating system's generator.
pub fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The OS generator failing is not something a gateway can run without.
    getrandom::fill(&mut b).expect("the operating system's random generator");
    b
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k2_digest_is_keyed_and_round_trips_through_hex() {
        let a = Hasher::new(b"0123456789abcdef").unwrap();
        let b = Hasher::new(b"fedcba9876543210").unwrap();
        let d = a.digest("sk-1");
        assert_eq!(d, a.digest("sk-1"));
        assert_ne!(d, a.digest("sk-2"));
        assert_ne!(d, b.digest("sk-1"), "another hash secret, another digest");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert!(d.matches(&a.digest("sk-1")) && !d.matches(&a.digest("sk-2")));
        assert_eq!(Digest::from_hex("zz"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
        assert!(Hasher::new(b"short").is_err());
    }

    #[test]
    fn k2_secrets_are_fresh_and_never_printed() {
        let s = Secret::new_key();
        assert!(s.expose().starts_with("sk-pcx-") && s.expose().len() == 55);
        assert_ne!(s.expose(), Secret::new_key().expose());
        assert!(!format!("{s:?}").contains(&s.expose()[7..]));
        assert!(Secret::new_token().expose().starts_with("pcx-mt-"));
        let id = new_id("key_");
        assert_eq!(id.len(), 24);
        assert_ne!(id, new_id("key_"));
    }
}
