//! What every leg of a stream's translation is and says: the [`Leg`] trait, where its
//! stream stands ([`End`]) and the client-facing reasons it ends with an error. The
//! legs live with their dialects (`gemini`, `responses`) and beside this module
//! (`a_to_o`, `o_to_a`); the [`StreamTranslator`](super::StreamTranslator) in the
//! module above picks and chains them.

/// The client-facing reason of a stream cut before its final event.
pub(crate) const TRUNCATED: &str = "the upstream stream ended before its final event";
/// The client-facing reason of a stream event that could not be read.
pub(crate) const MALFORMED: &str = "the upstream stream sent an event that could not be read";

/// One leg of a stream's translation: the events of one dialect in, the bytes of
/// another out. A translation between two dialects neither of which is OpenAI chat
/// runs two legs through it (see [`Wire`](crate::translate::Wire)).
pub(crate) trait Leg: std::fmt::Debug + Send {
    /// One complete event: `name` from its `event:` line (empty when none), `data`
    /// its joined `data:` lines. Returns whether to go on: false once the stream has
    /// ended, cleanly or with the client's error. `at_eof`: the event is the body's
    /// last, unterminated one; if it does not parse it was cut, and the leg returns
    /// true without failing (its `finish` then reports the truncation).
    fn event(&mut self, name: &str, data: &[u8], at_eof: bool, out: &mut Vec<u8>) -> bool;
    /// The body ended after every event: true when the stream had ended with its
    /// final event (or, for a dialect without one, with a complete answer); otherwise
    /// the leg writes the client's in-stream error and returns false.
    fn finish(&mut self, out: &mut Vec<u8>) -> bool;
    /// Ends the stream with the client's in-stream error (`code`: a short machine
    /// name for an OpenAI client).
    fn fail(&mut self, message: &str, code: &str, out: &mut Vec<u8>);
}

/// Where a leg's stream is: still open, ended with its final event, or ended with the
/// client's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Open,
    Clean,
    Failed,
}
