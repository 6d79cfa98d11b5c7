//! A server-sent-events splitter with constant memory.
//!
//! Lines end with `\n`, `\r\n` or `\r` (a `\r\n` split across chunks is one line end).
//! The bytes of `data:` lines are fed straight into the event's [`Scanner`] (several
//! data lines are joined with `\n`, as the SSE specification says), so an event of any
//! size costs no memory. `event:` names are kept up to [`EVENT_CAP`] bytes; other fields
//! and comments are skipped. A blank line dispatches the event.

use crate::json::{Scanner, Sink};
use memchr::memchr2;

/// Longest event name kept; longer names are truncated.
pub(crate) const EVENT_CAP: usize = 32;
/// Longest field name recognised (`data`, `event`); longer names are skipped.
const NAME_CAP: usize = 8;

/// What an SSE consumer is told besides the JSON of each event.
pub(crate) trait EventSink: Sink {
    /// The `event:` name of the event about to end (empty when none).
    fn set_event(&mut self, name: &[u8]);
    /// The event's data was exactly `[DONE]` (OpenAI's end of stream).
    fn done_marker(&mut self);
    /// The event was dispatched (after its JSON, if any, ended).
    fn event_done(&mut self);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Start,
    Name,
    Data,
    Event,
    Skip,
}

pub(crate) struct SseParser {
    line: Line,
    /// The previous byte was `\r`: a `\n` now belongs to the same line end.
    cr: bool,
    /// Skip one space after the field's colon.
    strip: bool,
    name: [u8; NAME_CAP],
    name_len: usize,
    name_over: bool,
    event: [u8; EVENT_CAP],
    event_len: usize,
    data_lines: u32,
    data_len: u64,
    head: [u8; 6],
}

impl SseParser {
    pub(crate) fn new() -> Self {
        SseParser {
            line: Line::Start,
            cr: false,
            strip: false,
            name: [0; NAME_CAP],
            name_len: 0,
            name_over: false,
            event: [0; EVENT_CAP],
            event_len: 0,
            data_lines: 0,
            data_len: 0,
            head: [0; 6],
        }
    }

    pub(crate) fn feed(&mut self, b: &[u8], scanner: &mut Scanner, sink: &mut impl EventSink) {
        let mut i = 0;
        while i < b.len() {
            if self.cr {
                self.cr = false;
                if b[i] == b'\n' {
                    i += 1;
                    continue;
                }
            }
            match self.line {
                Line::Start => match b[i] {
                    c @ (b'\n' | b'\r') => {
                        i += 1;
                        self.cr = c == b'\r';
                        self.dispatch(scanner, sink);
                    }
                    b':' => {
                        i += 1;
                        self.line = Line::Skip;
                    }
                    _ => {
                        self.line = Line::Name;
                        self.name_len = 0;
                        self.name_over = false;
                    }
                },
                Line::Name => {
                    let c = b[i];
                    i += 1;
                    match c {
                        b':' => self.field(scanner, sink),
                        b'\n' | b'\r' => {
                            // A field with no colon has an empty value.
                            self.field(scanner, sink);
                            self.end_line(c);
                        }
                        _ if self.name_len < NAME_CAP => {
                            self.name[self.name_len] = c;
                            self.name_len += 1;
                        }
                        _ => self.name_over = true,
                    }
                }
                Line::Data | Line::Event | Line::Skip => {
                    if self.strip {
                        self.strip = false;
                        if b[i] == b' ' {
                            i += 1;
                            continue;
                        }
                    }
                    let rest = &b[i..];
                    let (seg, eol) = match memchr2(b'\n', b'\r', rest) {
                        Some(j) => (&rest[..j], Some(rest[j])),
                        None => (rest, None),
                    };
                    match self.line {
                        Line::Data => {
                            for (k, &c) in seg.iter().enumerate() {
                                let at = self.data_len.saturating_add(k as u64);
                                if at < 6 {
                                    self.head[at as usize] = c;
                                } else {
                                    break;
                                }
                            }
                            self.data_len = self.data_len.saturating_add(seg.len() as u64);
                            scanner.feed(seg, sink);
                        }
                        Line::Event => {
                            let room = EVENT_CAP - self.event_len;
                            let n = seg.len().min(room);
                            self.event[self.event_len..self.event_len + n]
                                .copy_from_slice(&seg[..n]);
                            self.event_len += n;
                        }
                        _ => {}
                    }
                    i += seg.len();
                    if let Some(c) = eol {
                        i += 1;
                        self.end_line(c);
                    }
                }
            }
        }
    }

    /// End of the body: an event not yet dispatched is dispatched (its JSON counts only
    /// if complete).
    pub(crate) fn finish(&mut self, scanner: &mut Scanner, sink: &mut impl EventSink) {
        self.dispatch(scanner, sink);
    }

    fn end_line(&mut self, c: u8) {
        self.line = Line::Start;
        self.cr = c == b'\r';
    }

    fn field(&mut self, scanner: &mut Scanner, sink: &mut impl EventSink) {
        self.strip = true;
        let name = &self.name[..self.name_len];
        self.line = if self.name_over {
            Line::Skip
        } else if name == b"data" {
            if self.data_lines > 0 {
                scanner.feed(b"\n", sink);
                self.data_len = self.data_len.saturating_add(1);
            }
            self.data_lines = self.data_lines.saturating_add(1);
            Line::Data
        } else if name == b"event" {
            self.event_len = 0;
            Line::Event
        } else {
            Line::Skip
        };
    }

    fn dispatch(&mut self, scanner: &mut Scanner, sink: &mut impl EventSink) {
        if self.data_lines > 0 {
            sink.set_event(&self.event[..self.event_len]);
            if self.data_len == 6 && &self.head == b"[DONE]" {
                sink.done_marker();
            }
            scanner.end_input(sink);
            sink.event_done();
            sink.set_event(b"");
        }
        scanner.reset();
        self.data_lines = 0;
        self.data_len = 0;
        self.event_len = 0;
    }
}
