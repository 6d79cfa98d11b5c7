//! What the walk over a request body read: the state every visitor of one inspection
//! shares, and the input of the vendors' rules ([`providers`](crate::providers)).

use super::error::RequestError;
use crate::estimate::Tally;
use serde_json::error::Category;

/// One step of the JSON path to the value being read, for error messages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Seg {
    Key(&'static str),
    Index(usize),
}

/// What the walk read, for the vendor rules ([`providers`](crate::providers)).
pub(crate) type Read = Ctx;

/// State shared by every visitor of one inspection.
#[derive(Default)]
pub(crate) struct Ctx {
    /// Path to the value being read; left as it is when a visitor fails.
    pub(super) path: Vec<Seg>,
    /// The path inside a derived settings object (`generationConfig`, …) where it
    /// failed, after `path`.
    pub(super) tail: Option<String>,
    /// What the value being read must be; for error messages.
    pub(super) expect: &'static str,
    pub(super) gemini: bool,
    pub(super) tally: Tally,
    pub(super) model: Option<String>,
    pub(crate) model_too_long: bool,
    pub(super) continues: Option<String>,
    pub(super) stream: Option<bool>,
    pub(crate) include_usage: Option<bool>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_completion_tokens: Option<u64>,
    pub(crate) max_output_tokens: Option<u64>,
    pub(crate) gen_max_output: Option<u64>,
    pub(crate) n: Option<u64>,
    pub(crate) candidate_count: Option<u64>,
    pub(super) structured: bool,
    pub(crate) image_output: bool,
}

impl Ctx {
    pub(super) fn new(gemini: bool) -> Self {
        Ctx {
            expect: "a JSON object",
            gemini,
            ..Ctx::default()
        }
    }

    pub(super) fn text(&mut self, bytes: u64) {
        self.tally.text_bytes = self.tally.text_bytes.saturating_add(bytes);
    }

    pub(super) fn schema(&mut self, bytes: u64) {
        self.tally.schema_bytes = self.tally.schema_bytes.saturating_add(bytes);
    }

    pub(super) fn message(&mut self) {
        self.tally.messages = self.tally.messages.saturating_add(1);
    }

    pub(super) fn error(&self, e: &serde_json::Error) -> RequestError {
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            Category::Data if self.path.is_empty() => RequestError::NotAnObject,
            Category::Data => RequestError::WrongType {
                field: match &self.tail {
                    Some(tail) => format!("{}.{tail}", render_path(&self.path)),
                    None => render_path(&self.path),
                },
                expected: self.expect,
                line,
                column,
            },
            Category::Syntax | Category::Eof | Category::Io => {
                let text = e.to_string();
                let suffix = format!(" at line {line} column {column}");
                RequestError::Malformed {
                    line,
                    column,
                    reason: text.strip_suffix(&suffix).unwrap_or(&text).to_owned(),
                }
            }
        }
    }
}

fn render_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_json_paths() {
        let p = [
            Seg::Key("messages"),
            Seg::Index(2),
            Seg::Key("content"),
            Seg::Index(0),
        ];
        assert_eq!(render_path(&p), "messages[2].content[0]");
    }
}
