//! An incremental JSON scanner with constant memory.
//!
//! It reads a document byte by byte, in chunks of any size split anywhere (mid-token,
//! mid-escape, mid-UTF-8), and reports to a [`Sink`] the path and value of every scalar
//! and the path of every container it opens. It buffers nothing but small bounded
//! captures (see the caps below), so a 100 MB string costs no memory; strings are
//! skipped a machine word at a time, then with `memchr`. Grammar errors make the
//! document invalid (its captures are discarded by the sink); the scanner then ignores
//! input until it is reset.
//!
//! The common shapes of a provider's answer take fast paths, each equivalent to the
//! byte-by-byte state machine (a test reads documents both ways): a string whole in
//! its chunk is handed to the sink as the input's own bytes; a key, its colon and the
//! value's first byte are read in one step, as are a value's comma and the next key's
//! quote; a token count ending in its chunk is read in place.

use memchr::memchr2;

/// Deepest nesting tracked; a deeper document is invalid (as in `serde_json`).
pub(crate) const MAX_DEPTH: usize = 128;
/// Longest key kept for path matching; longer keys match nothing.
pub(crate) const KEY_CAP: usize = 32;
/// Longest string value kept (decoded bytes); the rest is counted, not kept.
pub(crate) const STR_CAP: usize = 512;
/// Longest number kept; longer numbers are valid but have no value.
const NUM_CAP: usize = 40;
/// Levels the path has room for from the start: a provider's answer nests four or five
/// deep, and growing the path level by level would reallocate it twice per answer.
const FRAMES_AT_START: usize = 8;

/// One level of the path: an object with its current key, or an array with its
/// current index.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    array: bool,
    long: bool,
    len: u8,
    key: [u8; KEY_CAP],
}

impl Frame {
    fn object() -> Self {
        Frame {
            array: false,
            long: false,
            len: 0,
            key: [0; KEY_CAP],
        }
    }

    fn array() -> Self {
        Frame {
            array: true,
            ..Frame::object()
        }
    }

    /// Whether this level is an array element.
    pub(crate) fn is_index(&self) -> bool {
        self.array
    }

    /// Whether this level is the object key `k`.
    pub(crate) fn is_key(&self, k: &str) -> bool {
        self.key() == Some(k.as_bytes())
    }

    /// This level's object key (`None` for an array element or a key longer than
    /// [`KEY_CAP`]).
    pub(crate) fn key(&self) -> Option<&[u8]> {
        (!self.array && !self.long).then(|| &self.key[..usize::from(self.len)])
    }

    /// Sets the whole key `key`, which starts `window` (the rest of the chunk).
    fn set_key(&mut self, key: &[u8], window: &[u8]) {
        if key.len() > KEY_CAP {
            self.long = true;
        } else if let Some(w) = window.first_chunk::<KEY_CAP>() {
            // One fixed-size move instead of a variable-length copy.
            self.key = *w;
            self.len = key.len() as u8;
        } else {
            self.push_key(key);
        }
    }

    fn push_key(&mut self, bytes: &[u8]) {
        let len = usize::from(self.len);
        if len + bytes.len() > KEY_CAP {
            self.long = true;
        } else {
            self.key[len..len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len() as u8;
        }
    }
}

/// A scalar value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scalar<'a> {
    /// A string: its first [`STR_CAP`] decoded bytes and its full length.
    Str(&'a [u8], u64),
    /// A number: its value if it is a non-negative integer (floats truncated) that fits.
    Num(Option<u64>),
    /// `true` / `false` (no extractor needs the value yet).
    Bool(#[cfg_attr(not(test), allow(dead_code))] bool),
    /// `null`.
    Null,
}

/// Receives what a [`Scanner`] reads.
pub(crate) trait Sink {
    /// A document starts.
    fn begin(&mut self);
    /// A container starts at `path` (relative to the document).
    fn open(&mut self, path: &[Frame], array: bool);
    /// A scalar at `path`.
    fn scalar(&mut self, path: &[Frame], value: Scalar<'_>);
    /// The document ended: `complete` when it parsed to its end.
    fn end(&mut self, complete: bool);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Expecting a value.
    Value,
    /// After `[`: a value or `]`.
    ArrFirst,
    /// After `{`: a key or `}`.
    ObjFirst,
    /// After `,` in an object: a key.
    ObjKey,
    /// After a key: `:`.
    Colon,
    /// After a value in a container: `,` or the closer.
    After,
    Str,
    Num,
    Lit,
    /// The root value is complete.
    Done,
    Invalid,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Esc {
    None,
    Backslash,
    Hex(u8, u16),
}

/// See the module documentation.
pub(crate) struct Scanner {
    frames: Vec<Frame>,
    st: St,
    key: bool,
    esc: Esc,
    /// A pending high surrogate of a `\u` escape (0 = none).
    hi: u16,
    sbuf: Vec<u8>,
    slen: u64,
    num: [u8; NUM_CAP],
    num_len: usize,
    num_over: bool,
    lit: &'static [u8],
    lit_pos: usize,
    /// JSON body mode: a document is complete when its root closes (rather than when
    /// the SSE event ends), several documents may follow each other, and a root array
    /// is a stream of documents (Gemini without `alt=sse`).
    body: bool,
    array_root: bool,
    in_doc: bool,
    closed: bool,
}

impl Scanner {
    pub(crate) fn new(body: bool) -> Self {
        Scanner {
            frames: Vec::with_capacity(FRAMES_AT_START),
            st: St::Value,
            key: false,
            esc: Esc::None,
            hi: 0,
            sbuf: Vec::new(),
            slen: 0,
            num: [0; NUM_CAP],
            num_len: 0,
            num_over: false,
            lit: b"",
            lit_pos: 0,
            body,
            array_root: false,
            in_doc: false,
            closed: false,
        }
    }

    /// Forgets the current document (the next SSE event starts afresh).
    pub(crate) fn reset(&mut self) {
        self.frames.clear();
        self.st = St::Value;
        self.array_root = false;
        self.in_doc = false;
    }

    /// Whether a root value has been closed (a JSON body reached its end).
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Heap bytes held (bounded by the caps).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.frames.capacity() * std::mem::size_of::<Frame>() + self.sbuf.capacity()
    }

    fn path(&self) -> &[Frame] {
        let off = usize::from(self.array_root).min(self.frames.len());
        &self.frames[off..]
    }

    /// End of input (of the body, or of one SSE event's data): a root number is
    /// complete; a document still open ends incomplete.
    pub(crate) fn end_input(&mut self, sink: &mut impl Sink) {
        if self.st == St::Num && self.frames.is_empty() {
            self.end_number(sink);
        }
        if self.in_doc {
            self.in_doc = false;
            sink.end(self.st == St::Done);
        }
    }

    /// Reads `b`.
    pub(crate) fn feed(&mut self, b: &[u8], sink: &mut impl Sink) {
        let mut i = 0;
        while i < b.len() {
            match self.st {
                St::Invalid => return,
                St::Str => i = self.string(b, i, sink),
                St::Num => {
                    // The whole run of number bytes in this chunk at once.
                    let run = b[i..]
                        .iter()
                        .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .unwrap_or(b.len() - i);
                    if i + run < b.len() && self.num_len + run <= 19 {
                        // The usual case, a token count ending in this chunk: read in
                        // place when it is all digits, without the copy (nineteen
                        // digits always fit a `u64`).
                        let head = &self.num[..self.num_len];
                        let digits = &b[i..i + run];
                        if head.iter().chain(digits).all(u8::is_ascii_digit) {
                            let v = digits_value(head.iter().chain(digits));
                            sink.scalar(self.path(), Scalar::Num(Some(v)));
                            self.value_done(sink);
                            i = self.next_after_value(b, i + run);
                            continue;
                        }
                    }
                    let keep = run.min(NUM_CAP - self.num_len);
                    self.num[self.num_len..self.num_len + keep].copy_from_slice(&b[i..i + keep]);
                    self.num_len += keep;
                    self.num_over |= keep < run;
                    i += run;
                    if i < b.len() {
                        // The byte that ends a number is read again as structure.
                        self.end_number(sink);
                    }
                }
                St::Lit => {
                    if b[i] != self.lit[self.lit_pos] {
                        self.invalid(sink);
                        return;
                    }
                    i += 1;
                    self.lit_pos += 1;
                    if self.lit_pos == self.lit.len() {
                        let v = match self.lit {
                            b"true" => Scalar::Bool(true),
                            b"false" => Scalar::Bool(false),
                            _ => Scalar::Null,
                        };
                        sink.scalar(self.path(), v);
                        self.value_done(sink);
                    }
                }
                _ => {
                    let c = b[i];
                    i += 1;
                    if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                        self.structure(c, sink);
                        // What usually follows at once: an object's first key, or the
                        // `,` after a container closed.
                        match self.st {
                            St::ObjFirst if b.get(i) == Some(&b'"') => {
                                self.start_string(true);
                                i += 1;
                            }
                            St::After => i = self.next_after_value(b, i),
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    fn invalid(&mut self, sink: &mut impl Sink) {
        self.st = St::Invalid;
        if self.in_doc {
            self.in_doc = false;
            sink.end(false);
        }
    }

    #[inline(always)]
    fn structure(&mut self, c: u8, sink: &mut impl Sink) {
        match self.st {
            St::Value => self.start_value(c, sink),
            St::ArrFirst if c == b']' => self.close(sink),
            St::ArrFirst => self.start_value(c, sink),
            St::ObjFirst if c == b'}' => self.close(sink),
            St::ObjFirst | St::ObjKey if c == b'"' => self.start_string(true),
            St::Colon if c == b':' => self.st = St::Value,
            St::After => {
                let array = self.frames.last().is_some_and(|f| f.array);
                match (c, array) {
                    (b',', true) => self.st = St::Value,
                    (b',', false) => self.st = St::ObjKey,
                    (b']', true) | (b'}', false) => self.close(sink),
                    _ => self.invalid(sink),
                }
            }
            St::Done if self.body && (c == b'{' || c == b'[') => {
                self.st = St::Value;
                self.start_value(c, sink);
            }
            _ => self.invalid(sink),
        }
    }

    fn start_value(&mut self, c: u8, sink: &mut impl Sink) {
        if self.frames.is_empty() && self.body && c == b'[' {
            // A JSON array stream: each element is a document.
            self.array_root = true;
            self.frames.push(Frame::array());
            self.st = St::ArrFirst;
            return;
        }
        if self.frames.len() == usize::from(self.array_root) {
            self.in_doc = true;
            sink.begin();
        }
        // Entering an array element moves its index on; the frame holds no index (paths
        // match any element), so nothing to do here.
        match c {
            b'{' | b'[' => {
                if self.frames.len() >= MAX_DEPTH {
                    self.invalid(sink);
                    return;
                }
                let array = c == b'[';
                sink.open(self.path(), array);
                if array {
                    self.frames.push(Frame::array());
                    self.st = St::ArrFirst;
                } else {
                    self.frames.push(Frame::object());
                    self.st = St::ObjFirst;
                }
            }
            b'"' => self.start_string(false),
            b'-' | b'0'..=b'9' => self.start_number(c),
            b't' | b'f' | b'n' => {
                self.st = St::Lit;
                self.lit = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                self.lit_pos = 1;
            }
            _ => self.invalid(sink),
        }
    }

    fn close(&mut self, sink: &mut impl Sink) {
        self.frames.pop();
        if self.array_root && self.frames.is_empty() {
            self.array_root = false;
            self.st = St::Done;
            self.closed = true;
            return;
        }
        self.value_done(sink);
    }

    fn value_done(&mut self, sink: &mut impl Sink) {
        if self.frames.is_empty() {
            self.st = St::Done;
            if self.body {
                self.closed = true;
                if self.in_doc {
                    self.in_doc = false;
                    sink.end(true);
                }
            }
        } else {
            if self.array_root && self.frames.len() == 1 && self.in_doc {
                self.in_doc = false;
                sink.end(true);
            }
            self.st = St::After;
        }
    }

    fn end_number(&mut self, sink: &mut impl Sink) {
        let value = if self.num_over {
            Some(None)
        } else {
            parse_number(&self.num[..self.num_len])
        };
        match value {
            Some(v) => {
                sink.scalar(self.path(), Scalar::Num(v));
                self.value_done(sink);
            }
            None => self.invalid(sink),
        }
    }

    fn start_number(&mut self, first: u8) {
        self.st = St::Num;
        self.num[0] = first;
        self.num_len = 1;
        self.num_over = false;
    }

    /// After a value inside a container (`St::After`), reads a `,` that follows at once,
    /// and in an object the `"` of the next key when it follows at once too; returns
    /// where it stopped.
    fn next_after_value(&mut self, b: &[u8], i: usize) -> usize {
        if self.st != St::After || b.get(i) != Some(&b',') {
            return i;
        }
        if self.frames.last().is_some_and(|f| f.array) {
            self.st = St::Value;
            return i + 1;
        }
        if b.get(i + 1) == Some(&b'"') {
            self.start_string(true);
            return i + 2;
        }
        self.st = St::ObjKey;
        i + 1
    }

    fn start_string(&mut self, key: bool) {
        self.st = St::Str;
        self.key = key;
        self.esc = Esc::None;
        self.hi = 0;
        if key {
            if let Some(f) = self.frames.last_mut() {
                f.len = 0;
                f.long = false;
            }
        } else {
            self.sbuf.clear();
            self.slen = 0;
        }
    }

    /// Reads string bytes from `b[i..]`; returns where it stopped.
    fn string(&mut self, b: &[u8], mut i: usize, sink: &mut impl Sink) -> usize {
        while i < b.len() {
            match self.esc {
                Esc::None => {
                    let rest = &b[i..];
                    match find_quote_or_escape(rest) {
                        None => {
                            self.put(rest);
                            return b.len();
                        }
                        Some(j) if rest[j] == b'"' && self.whole_string_so_far() => {
                            // The usual case: the whole string in this chunk, without
                            // escapes. A key is copied with one fixed-size move when the
                            // chunk holds that many bytes; a value goes to the sink as
                            // the input's own bytes, without a copy.
                            let s = &rest[..j];
                            if self.key {
                                if let Some(f) = self.frames.last_mut() {
                                    f.set_key(s, rest);
                                }
                                // The colon and the value's first byte, when they follow
                                // at once (as they do in compact JSON), without more
                                // turns of the loop.
                                if rest.get(j + 1) != Some(&b':') {
                                    self.st = St::Colon;
                                    return i + j + 1;
                                }
                                let k = i + j + 2;
                                match b.get(k) {
                                    Some(b'"') => {
                                        self.start_string(false);
                                        i = k + 1;
                                        continue;
                                    }
                                    Some(&c @ b'0'..=b'9') => {
                                        self.start_number(c);
                                        return k + 1;
                                    }
                                    _ => {
                                        self.st = St::Value;
                                        return k;
                                    }
                                }
                            }
                            let kept = &s[..s.len().min(STR_CAP)];
                            sink.scalar(self.path(), Scalar::Str(kept, s.len() as u64));
                            self.value_done(sink);
                            i = self.next_after_value(b, i + j + 1);
                            if self.st != St::Str {
                                return i;
                            }
                        }
                        Some(j) => {
                            self.put(&rest[..j]);
                            i += j + 1;
                            if rest[j] == b'"' {
                                self.end_string(sink);
                                return i;
                            }
                            self.esc = Esc::Backslash;
                        }
                    }
                }
                Esc::Backslash => {
                    let c = b[i];
                    i += 1;
                    self.esc = Esc::None;
                    let out: u8 = match c {
                        b'"' | b'\\' | b'/' => c,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            self.esc = Esc::Hex(0, 0);
                            continue;
                        }
                        _ => {
                            self.invalid(sink);
                            return b.len();
                        }
                    };
                    self.put(&[out]);
                }
                Esc::Hex(n, acc) => {
                    let Some(d) = (b[i] as char).to_digit(16) else {
                        self.invalid(sink);
                        return b.len();
                    };
                    i += 1;
                    let acc = acc << 4 | d as u16;
                    if n == 3 {
                        self.esc = Esc::None;
                        self.put_unit(acc);
                    } else {
                        self.esc = Esc::Hex(n + 1, acc);
                    }
                }
            }
        }
        i
    }

    /// Nothing of the current string has been read yet: no bytes, no pending escape or
    /// surrogate.
    fn whole_string_so_far(&self) -> bool {
        self.esc == Esc::None
            && self.hi == 0
            && if self.key {
                self.frames.last().is_none_or(|f| f.len == 0)
            } else {
                self.slen == 0
            }
    }

    fn end_string(&mut self, sink: &mut impl Sink) {
        self.flush_surrogate();
        if self.key {
            self.st = St::Colon;
        } else {
            sink.scalar(self.path(), Scalar::Str(&self.sbuf, self.slen));
            self.value_done(sink);
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.flush_surrogate();
        self.put_raw(bytes);
    }

    fn put_raw(&mut self, bytes: &[u8]) {
        if self.key {
            if let Some(f) = self.frames.last_mut() {
                f.push_key(bytes);
            }
        } else {
            self.slen = self.slen.saturating_add(bytes.len() as u64);
            let room = STR_CAP.saturating_sub(self.sbuf.len());
            self.sbuf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    fn put_char(&mut self, c: char) {
        let mut buf = [0; 4];
        self.put_raw(c.encode_utf8(&mut buf).as_bytes());
    }

    fn flush_surrogate(&mut self) {
        if self.hi != 0 {
            self.hi = 0;
            self.put_char(char::REPLACEMENT_CHARACTER);
        }
    }

    fn put_unit(&mut self, u: u16) {
        match u {
            0xD800..=0xDBFF => {
                self.flush_surrogate();
                self.hi = u;
            }
            0xDC00..=0xDFFF => {
                let c = if self.hi != 0 {
                    let c =
                        0x10000 + ((u32::from(self.hi) - 0xD800) << 10) + (u32::from(u) - 0xDC00);
                    char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
                } else {
                    char::REPLACEMENT_CHARACTER
                };
                self.hi = 0;
                self.put_char(c);
            }
            _ => {
                self.flush_surrogate();
                self.put_char(char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
        }
    }
}

/// The first `"` or `\\` in `b`. Most strings of a provider's answer end within a few
/// bytes (keys, ids, token-count names), where `memchr2` spends more setting up its
/// vector search than searching; so the first 32 bytes are read eight at a time in a
/// machine word (the classic "has a zero byte" test, whose lowest flagged byte is
/// exact), and `memchr2` takes over for longer strings (generated text). Written here
/// because `memchr` has no routine tuned for short haystacks.
fn find_quote_or_escape(b: &[u8]) -> Option<usize> {
    const HEAD: usize = 32;
    const LO: u64 = u64::from_le_bytes([0x01; 8]);
    const HI: u64 = u64::from_le_bytes([0x80; 8]);
    const QUOTE: u64 = u64::from_le_bytes([b'"'; 8]);
    const ESCAPE: u64 = u64::from_le_bytes([b'\\'; 8]);
    let zero_bytes = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut i = 0;
    while let Some(word) = b.get(i..i + 8).filter(|_| i < HEAD) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let hits = zero_bytes(w ^ QUOTE) | zero_bytes(w ^ ESCAPE);
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i < HEAD {
        // Fewer than eight bytes left.
        return b[i..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\')
            .map(|j| i + j);
    }
    memchr2(b'"', b'\\', &b[i..]).map(|j| i + j)
}

/// The value of at most nineteen ASCII digits (always fits a `u64`).
fn digits_value<'a>(digits: impl IntoIterator<Item = &'a u8>) -> u64 {
    digits
        .into_iter()
        .fold(0u64, |v, d| v * 10 + u64::from(d - b'0'))
}

/// `Some(value)` for a valid number (`value` is `None` unless it is a non-negative
/// number that fits a `u64`, fractions truncated); `None` for an invalid one.
fn parse_number(s: &[u8]) -> Option<Option<u64>> {
    // The usual case, a small non-negative integer (token counts): no UTF-8 check and no
    // `str::parse`. Nineteen digits always fit a `u64`.
    if !s.is_empty() && s.len() <= 19 && s.iter().all(u8::is_ascii_digit) {
        return Some(Some(digits_value(s)));
    }
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(v) = s.parse::<u64>() {
        return Some(Some(v));
    }
    // Only what a JSON number may look like reaches here: digits, sign, '.', 'e'.
    let f: f64 = s.parse().ok()?;
    if f.is_finite() && f >= 0.0 {
        Some(Some(f as u64))
    } else {
        Some(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer fast path of `parse_number` agrees with `str::parse` on every length
    /// around the `u64` limit, leading zeros included.
    #[test]
    fn w5_integer_fast_path_agrees_with_the_general_parse() {
        let general = |s: &str| -> Option<Option<u64>> {
            if let Ok(v) = s.parse::<u64>() {
                return Some(Some(v));
            }
            let f: f64 = s.parse().ok()?;
            Some((f.is_finite() && f >= 0.0).then_some(f as u64))
        };
        let mut cases: Vec<String> = vec!["0".into(), "007".into(), "42".into()];
        for len in 1..=22 {
            cases.push("9".repeat(len));
            cases.push(format!("1{}", "0".repeat(len - 1)));
        }
        cases.push(u64::MAX.to_string());
        cases.push("18446744073709551616".into());
        for c in &cases {
            assert_eq!(parse_number(c.as_bytes()), general(c), "{c}");
        }
        // Unchanged for everything else.
        assert_eq!(parse_number(b"1.5"), Some(Some(1)));
        assert_eq!(parse_number(b"-3"), Some(None));
        assert_eq!(parse_number(b"2e3"), Some(Some(2000)));
        assert_eq!(parse_number(b"-"), None);
    }

    /// Records every event as text.
    #[derive(Default)]
    struct Log(Vec<String>);

    fn render(path: &[Frame]) -> String {
        path.iter()
            .map(|f| {
                if f.array {
                    "*".to_owned()
                } else if f.long {
                    "<long>".to_owned()
                } else {
                    String::from_utf8_lossy(&f.key[..usize::from(f.len)]).into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    impl Sink for Log {
        fn begin(&mut self) {
            self.0.push("begin".into());
        }
        fn open(&mut self, path: &[Frame], array: bool) {
            self.0.push(format!(
                "open {} {}",
                render(path),
                if array { "[" } else { "{" }
            ));
        }
        fn scalar(&mut self, path: &[Frame], v: Scalar<'_>) {
            let v = match v {
                Scalar::Str(s, n) => format!("{:?}/{n}", String::from_utf8_lossy(s)),
                Scalar::Num(n) => format!("{n:?}"),
                Scalar::Bool(b) => b.to_string(),
                Scalar::Null => "null".into(),
            };
            self.0.push(format!("{} = {v}", render(path)));
        }
        fn end(&mut self, complete: bool) {
            self.0.push(format!("end {complete}"));
        }
    }

    fn scan(body: bool, input: &[u8]) -> Vec<String> {
        let mut s = Scanner::new(body);
        let mut log = Log::default();
        s.feed(input, &mut log);
        s.end_input(&mut log);
        log.0
    }

    #[test]
    fn paths_and_values() {
        let log = scan(
            true,
            br#" {"a":{"b":[1,{"c":"x\"\u00e9\ud83d\ude00"}],"d":-2.5e1,"e":[true,false,null]}} "#,
        );
        assert_eq!(
            log,
            [
                "begin",
                "open  {",
                "open a {",
                "open a.b [",
                "a.b.* = Some(1)",
                "open a.b.* {",
                "a.b.*.c = \"x\\\"é😀\"/8",
                "a.d = None",
                "open a.e [",
                "a.e.* = true",
                "a.e.* = false",
                "a.e.* = null",
                "end true",
            ]
        );
    }

    #[test]
    fn every_split_gives_the_same_events() {
        let input =
            br#"[{"k":"v\u00e9\n","n":12},{"long_key_that_is_longer_than_thirty_two_bytes":1.0}]"#;
        let whole = scan(true, input);
        assert_eq!(whole.iter().filter(|l| *l == "end true").count(), 2);
        for cut in 0..=input.len() {
            let mut s = Scanner::new(true);
            let mut log = Log::default();
            s.feed(&input[..cut], &mut log);
            s.feed(&input[cut..], &mut log);
            s.end_input(&mut log);
            assert_eq!(log.0, whole, "cut at {cut}");
        }
    }

    /// Strings whole in one chunk, keys copied in one move and numbers read in place
    /// (the fast paths) give the events that byte-at-a-time reading gives, which takes
    /// them only where a one-byte chunk holds all there is (an empty string's closing
    /// quote, the byte ending a number).
    #[test]
    fn w5_fast_paths_read_as_byte_at_a_time_does() {
        let input = br#"{"id":"chatcmpl-1","n":[0,17,-3,2.5e1,18446744073709551615,18446744073709551616],
            "k" : "v","":"","a_key_of_exactly_thirtytwo_bytes":"x","long_key_that_is_longer_than_thirty_two_bytes":true,
            "esc\u0041":"q\"\ud83d\ude00","deep":{"usage":{"prompt_tokens":12,"cached":null}},"lone":"\ud83dabc","last":"tail"}"#;
        let whole = scan(true, input);
        for event in [
            "id = \"chatcmpl-1\"/10",
            "n.* = Some(18446744073709551615)",
            "n.* = None",
            "escA = \"q\\\"😀\"/6",
            "a_key_of_exactly_thirtytwo_bytes = \"x\"/1",
            "<long> = true",
            "deep.usage.prompt_tokens = Some(12)",
            // A high surrogate with no low one after it reads as U+FFFD.
            "lone = \"\u{fffd}abc\"/6",
            "last = \"tail\"/4",
        ] {
            assert!(whole.iter().any(|e| e == event), "{event} in {whole:?}");
        }
        let mut s = Scanner::new(true);
        let mut log = Log::default();
        for b in input {
            s.feed(std::slice::from_ref(b), &mut log);
        }
        s.end_input(&mut log);
        assert_eq!(log.0, whole);
    }

    /// The word-at-a-time search finds the first `"` or `\\` wherever it is, after
    /// any bytes (multi-byte UTF-8 and bytes next to the needles' values included), in
    /// the word-sized head, its tail and beyond it.
    #[test]
    fn w5_the_string_end_search_finds_the_first_quote_or_escape() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\');
        for filler in [b'a', 0xc3, 0x00, 0x21, 0x23, 0x5b, 0x5d, 0xff, 0x01] {
            for len in 0..80 {
                let mut b = vec![filler; len];
                assert_eq!(find_quote_or_escape(&b), naive(&b), "{filler:#x} {len}");
                for at in 0..len {
                    for needle in [b'"', b'\\'] {
                        b[at] = needle;
                        // A second needle later must not be found first.
                        if at + 3 < len {
                            b[at + 3] = b'"';
                        }
                        assert_eq!(find_quote_or_escape(&b), Some(at), "{filler:#x} {len} {at}");
                        b.fill(filler);
                    }
                }
            }
        }
    }

    #[test]
    fn grammar_errors_end_the_document_incomplete() {
        for bad in [
            &br#"{"a" 1}"#[..],
            br#"{"a":tru}"#,
            br#"{"a":1,}x"#,
            b"[DONE]",
            br#"{"a":"\x"}"#,
        ] {
            let log = scan(false, bad);
            assert_eq!(
                log.last().map(String::as_str),
                Some("end false"),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A number is complete only when something follows it (or at the root, the end).
        assert_eq!(scan(false, b"{\"a\":1"), ["begin", "open  {", "end false"]);
        assert_eq!(
            scan(false, b"{\"a\":1,"),
            ["begin", "open  {", "a = Some(1)", "end false"]
        );
        assert_eq!(scan(false, b"42"), ["begin", " = Some(42)", "end true"]);
        // A comma after a complete root value is an error, and nothing after it counts
        // (not even what reads like a key and a next document).
        assert_eq!(
            scan(true, br#""a","b":{"c":1}"#),
            ["begin", " = \"a\"/1", "end true"]
        );
    }

    #[test]
    fn depth_is_capped() {
        let deep = "[".repeat(MAX_DEPTH + 1);
        let log = scan(false, deep.as_bytes());
        assert_eq!(log.last().map(String::as_str), Some("end false"));
    }

    #[test]
    fn long_strings_are_counted_not_kept() {
        let mut s = Scanner::new(true);
        let mut log = Log::default();
        s.feed(b"{\"t\":\"", &mut log);
        for _ in 0..1000 {
            s.feed(&[b'a'; 1000], &mut log);
        }
        s.feed(b"\"}", &mut log);
        assert!(log.0.iter().any(|l| l.ends_with("/1000000")));
        assert!(s.heap_bytes() < 16 * 1024);
    }
}
