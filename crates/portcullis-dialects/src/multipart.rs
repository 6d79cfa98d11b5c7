//! Multipart request inspection: OpenAI's `POST /v1/images/edits`, whose body is
//! `multipart/form-data` (the images to edit are files, the rest text fields).
//!
//! Only what the gateway needs is read — the `model`, `n` and `prompt` fields and how
//! many `image` / `image[]` files there are — by scanning for the part delimiters;
//! nothing is copied but the small text fields, so a body of large images costs one
//! pass over its bytes. By hand rather than with a multipart crate: those parse a
//! stream of chunks and hand out every part's content, where this reads a buffered
//! body and keeps three short fields.

use crate::estimate::{self, Tally};
use crate::request::{Operation, RequestError, RequestFacts};
use memchr::memmem;

/// The longest text field read (`prompt` is measured, not kept).
const FIELD_CAP: usize = 1024;

/// Inspects an image edit request: `content_type` is its `Content-Type` header,
/// `body` the whole body. The demand is `n` images (default 1, clamped to
/// 1..=[`MAX_CHOICES`](estimate::MAX_CHOICES)); the input estimate is the prompt's text
/// plus [`IMAGE_TOKENS`](estimate::IMAGE_TOKENS) per image file.
///
/// ```
/// use portcullis_dialects::multipart::inspect_image_edit;
/// let body = "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-image-1\r\n\
///     --XyZ\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n2\r\n\
///     --XyZ\r\nContent-Disposition: form-data; name=\"image[]\"; filename=\"a.png\"\r\n\
///     Content-Type: image/png\r\n\r\nPNG...\r\n--XyZ--\r\n";
/// let f = inspect_image_edit("multipart/form-data; boundary=XyZ", body.as_bytes(), &|_| None).unwrap();
/// assert_eq!((f.model.as_str(), f.images), ("gpt-image-1", 2));
/// ```
pub fn inspect_image_edit(
    content_type: &str,
    body: &[u8],
    default_max_output: &dyn Fn(&str) -> Option<u64>,
) -> Result<RequestFacts, RequestError> {
    let boundary = boundary(content_type)
        .ok_or_else(|| malformed("the content type must be multipart/form-data with a boundary"))?;
    let delimiter = [b"--".as_slice(), boundary.as_bytes()].concat();
    let finder = memmem::Finder::new(&delimiter);
    let mut model = None;
    let mut n = None;
    let mut tally = Tally::default();
    let mut at = finder
        .find(body)
        .ok_or_else(|| malformed("no part starts with the boundary"))?;
    loop {
        let after = at + delimiter.len();
        if body[after..].starts_with(b"--") {
            break;
        }
        let start = after
            + if body[after..].starts_with(b"\r\n") {
                2
            } else {
                return Err(malformed("a boundary line does not end with CRLF"));
            };
        // A part may have no headers at all: its content follows one more CRLF.
        let (head, content_at) = if body[start..].starts_with(b"\r\n") {
            (&body[start..start], start + 2)
        } else {
            let head_len = memmem::find(&body[start..], b"\r\n\r\n")
                .ok_or_else(|| malformed("a part's headers do not end"))?;
            (&body[start..start + head_len], start + head_len + 4)
        };
        let next = finder
            .find(&body[content_at..])
            .map(|i| content_at + i)
            .ok_or_else(|| malformed("the last part is not closed by the boundary"))?;
        // The content ends with the CRLF before the next delimiter.
        let content = body[content_at..next]
            .strip_suffix(b"\r\n")
            .unwrap_or(&body[content_at..next]);
        let (name, file) = disposition(head);
        match (name.as_deref(), file) {
            (Some("image" | "image[]"), true) => tally.images += 1,
            (Some("model"), false) => model = Some(text(content, "model")?),
            (Some("n"), false) => {
                let v = text(content, "n")?;
                n = Some(
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| RequestError::WrongType {
                            field: "n".to_owned(),
                            expected: "a non-negative integer",
                            line: 1,
                            column: 0,
                        })?,
                );
            }
            (Some("prompt"), false) => tally.text_bytes += content.len() as u64,
            _ => {}
        }
        at = next;
    }
    let model = model.ok_or(RequestError::MissingModel)?;
    if model.trim().is_empty() {
        return Err(RequestError::InvalidModel {
            reason: "must be a non-empty string",
        });
    }
    if model.len() > estimate::MAX_MODEL_LEN {
        return Err(RequestError::InvalidModel {
            reason: crate::request::MODEL_TOO_LONG,
        });
    }
    tally.messages = 1;
    let max_output_tokens =
        default_max_output(&model).unwrap_or(estimate::FALLBACK_MAX_OUTPUT_TOKENS);
    Ok(RequestFacts {
        operation: Operation::Generate,
        continues: None,
        stream: false,
        input_tokens: tally.input_tokens(),
        max_output_tokens,
        choices: 1,
        images: n.unwrap_or(1).clamp(1, estimate::MAX_CHOICES),
        videos: 0,
        has_tools: false,
        structured_output: false,
        usage_reported: true,
        model,
    })
}

fn malformed(reason: &'static str) -> RequestError {
    RequestError::Multipart { reason }
}

/// The `boundary` parameter of a `multipart/form-data` content type.
fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let kind = params.next()?.trim();
    if !kind.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches('"'))
        .filter(|b| !b.is_empty() && b.len() <= 70)
}

/// The field name of a part and whether it is a file (`filename=` given), from its
/// `Content-Disposition` header.
fn disposition(head: &[u8]) -> (Option<String>, bool) {
    let head = String::from_utf8_lossy(head);
    let Some(line) = head.split("\r\n").find(|l| {
        l.split(':')
            .next()
            .is_some_and(|k| k.trim().eq_ignore_ascii_case("content-disposition"))
    }) else {
        return (None, false);
    };
    let mut name = None;
    let mut file = false;
    for p in line.split(';').skip(1) {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        match k.trim() {
            "name" => name = Some(v.trim().trim_matches('"').to_owned()),
            "filename" => file = true,
            _ => {}
        }
    }
    (name, file)
}

/// A short text field as UTF-8.
fn text(content: &[u8], field: &'static str) -> Result<String, RequestError> {
    if content.len() > FIELD_CAP {
        return Err(RequestError::WrongType {
            field: field.to_owned(),
            expected: "a short text field",
            line: 1,
            column: 0,
        });
    }
    std::str::from_utf8(content)
        .map(str::to_owned)
        .map_err(|_| RequestError::WrongType {
            field: field.to_owned(),
            expected: "UTF-8 text",
            line: 1,
            column: 0,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CT: &str = "multipart/form-data; boundary=\"b0und\"";

    fn part(name: &str, file: Option<&str>, content: &[u8]) -> Vec<u8> {
        let mut p = b"--b0und\r\n".to_vec();
        match file {
            Some(f) => p.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\nContent-Type: image/png\r\n\r\n").as_bytes(),
            ),
            None => p.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        p.extend_from_slice(content);
        p.extend_from_slice(b"\r\n");
        p
    }

    fn body(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut b = parts.concat();
        b.extend_from_slice(b"--b0und--\r\n");
        b
    }

    #[test]
    fn p6_image_edit_reads_model_n_prompt_and_counts_image_files() {
        // A file whose bytes contain something like a delimiter line start and CRLFs.
        let png = b"\x89PNG\r\n\x1a\n--b0un\r\n\r\nmore bytes".repeat(1000);
        let b = body(&[
            part("image[]", Some("a.png"), &png),
            part("image[]", Some("b.png"), &png),
            part("mask", Some("m.png"), &png),
            part("prompt", None, &[b'x'; 300]),
            part("model", None, b"gpt-image-1"),
            part("n", None, b"3"),
        ]);
        let f = inspect_image_edit(CT, &b, &|m| (m == "gpt-image-1").then_some(1000)).unwrap();
        assert_eq!(f.model, "gpt-image-1");
        assert_eq!(f.images, 3, "n images requested");
        assert_eq!(f.max_output_tokens, 1000);
        assert_eq!(
            f.input_tokens,
            estimate::REQUEST_OVERHEAD_TOKENS
                + estimate::MESSAGE_OVERHEAD_TOKENS
                + 100
                + 2 * estimate::IMAGE_TOKENS,
            "prompt bytes / 3 and two input images (the mask is not one)"
        );
        assert!(f.usage_reported && !f.stream);
    }

    #[test]
    fn p6_a_part_without_headers_is_skipped() {
        let mut b = b"--b0und\r\n\r\nno headers here\r\n".to_vec();
        b.extend_from_slice(&body(&[part("model", None, b"m"), part("n", None, b"4")]));
        let f = inspect_image_edit(CT, &b, &|_| None).unwrap();
        assert_eq!((f.model.as_str(), f.images), ("m", 4));
    }

    #[test]
    fn p6_image_edit_defaults_to_one_image_and_needs_a_model() {
        let b = body(&[
            part("image", Some("a.png"), b"png"),
            part("model", None, b"m"),
        ]);
        assert_eq!(inspect_image_edit(CT, &b, &|_| None).unwrap().images, 1);
        let b = body(&[part("image", Some("a.png"), b"png")]);
        assert_eq!(
            inspect_image_edit(CT, &b, &|_| None).unwrap_err(),
            RequestError::MissingModel
        );
    }

    #[test]
    fn e4_bad_multipart_bodies_are_client_errors_never_panics() {
        let good = body(&[part("model", None, b"m"), part("n", None, b"2")]);
        for (ct, b) in [
            ("application/json", good.clone()),
            ("multipart/form-data", good.clone()),
            (CT, b"no delimiter at all".to_vec()),
            (
                CT,
                b"--b0und\r\nContent-Disposition: form-data; name=\"model\"\r\n".to_vec(),
            ),
            (
                CT,
                b"--b0und\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm".to_vec(),
            ),
            (
                CT,
                body(&[part("model", None, b"m"), part("n", None, b"two")]),
            ),
            (CT, body(&[part("model", None, &[b'm'; 2000])])),
        ] {
            assert!(
                inspect_image_edit(ct, &b, &|_| None).is_err(),
                "{ct} {:?}",
                String::from_utf8_lossy(&b)
            );
        }
        // Every prefix of a good body: an error or an answer, never a panic.
        for i in 0..good.len() {
            let _ = inspect_image_edit(CT, &good[..i], &|_| None);
        }
        assert_eq!(inspect_image_edit(CT, &good, &|_| None).unwrap().images, 2);
    }

    #[test]
    fn e4_field_model_and_boundary_bounds_are_exact() {
        let with = |model: &str, n: &str| {
            body(&[
                part("model", None, model.as_bytes()),
                part("n", None, n.as_bytes()),
            ])
        };
        // A model name of 256 bytes is read; 257 is refused.
        let m = "m".repeat(estimate::MAX_MODEL_LEN);
        assert_eq!(
            inspect_image_edit(CT, &with(&m, "1"), &|_| None)
                .unwrap()
                .model,
            m
        );
        let long = "m".repeat(estimate::MAX_MODEL_LEN + 1);
        assert!(matches!(
            inspect_image_edit(CT, &with(&long, "1"), &|_| None),
            Err(RequestError::InvalidModel { .. })
        ));
        // A text field of FIELD_CAP bytes is read; one byte more is refused.
        let n = format!("{}2", "0".repeat(FIELD_CAP - 1));
        assert_eq!(
            inspect_image_edit(CT, &with("m", &n), &|_| None)
                .unwrap()
                .images,
            2
        );
        let n = format!("{}2", "0".repeat(FIELD_CAP));
        assert!(inspect_image_edit(CT, &with("m", &n), &|_| None).is_err());
        // A boundary of 70 characters is taken (RFC 2046's most), 71 or none is not.
        let b70 = "b".repeat(70);
        let good = format!(
            "--{b70}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--{b70}--\r\n"
        );
        let ct = format!("multipart/form-data; boundary={b70}");
        assert_eq!(
            inspect_image_edit(&ct, good.as_bytes(), &|_| None)
                .unwrap()
                .model,
            "m"
        );
        let b71 = "b".repeat(71);
        let bad = good.replace(&b70, &b71);
        let ct71 = format!("multipart/form-data; boundary={b71}");
        assert!(inspect_image_edit(&ct71, bad.as_bytes(), &|_| None).is_err());
        assert!(
            inspect_image_edit("multipart/form-data; boundary=", good.as_bytes(), &|_| None)
                .is_err()
        );
    }
}
