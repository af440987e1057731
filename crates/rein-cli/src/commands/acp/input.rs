//! What `rein acp` reads from its client, line by line, before the ACP
//! connection sees it: a line that is not UTF-8, or longer than
//! [`MOST_LINE_BYTES`], would end the connection (the SDK reads text); it is
//! replaced by a line that is not JSON and says what was wrong, which the
//! connection answers with a JSON-RPC parse error (`-32700`, the line quoted
//! in `data`) and goes on.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// The longest line (one JSON-RPC message) read: 4 MiB.
pub const MOST_LINE_BYTES: usize = 4 * 1024 * 1024;

/// `input`, each line passed on as it is, or replaced as the module's doc
/// says.
pub fn checked(input: impl AsyncRead + Unpin + Send + 'static) -> impl AsyncRead + Unpin + Send {
    let (reader, mut writer) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            let (read, cut) = match read_line(&mut input, &mut line).await {
                Ok(r) => r,
                Err(_) => break,
            };
            if read == 0 {
                break;
            }
            let passed = if cut {
                refusal(&format!(
                    "a line of more than {MOST_LINE_BYTES} bytes, the most rein acp reads"
                ))
            } else if std::str::from_utf8(&line).is_err() {
                refusal(&format!("a line of {read} bytes that is not UTF-8"))
            } else {
                std::mem::take(&mut line)
            };
            if writer.write_all(&passed).await.is_err() {
                break;
            }
        }
        // The client closed its end: so does the connection's.
        let _ = writer.shutdown().await;
    });
    reader
}

/// A line the connection cannot parse, saying what was wrong.
fn refusal(what: &str) -> Vec<u8> {
    format!("{{\"rein\": \"refused {what}\"\n").into_bytes()
}

/// Reads one line into `line` (at most [`MOST_LINE_BYTES`] of it; the rest
/// up to its end is read and dropped): the bytes read in all, and whether
/// the line was cut.
async fn read_line(
    input: &mut (impl tokio::io::AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok((read, read > MOST_LINE_BYTES));
        }
        let (take, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() < MOST_LINE_BYTES + 1 {
            let room = MOST_LINE_BYTES + 1 - line.len();
            line.extend_from_slice(&buf[..take.min(room)]);
        }
        input.consume(take);
        read += take;
        if end {
            return Ok((read, read > MOST_LINE_BYTES + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn lines_that_cannot_be_read_are_replaced_and_the_rest_passed_on() {
        let mut input = b"{\"ok\": 1}\n".to_vec();
        input.extend_from_slice(b"\xff\xfe bad\n");
        input.extend_from_slice(&vec![b'x'; MOST_LINE_BYTES + 10]);
        input.extend_from_slice(b"\n{\"ok\": 2}\n");
        let mut out = String::new();
        checked(std::io::Cursor::new(input))
            .read_to_string(&mut out)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0], "{\"ok\": 1}");
        assert!(
            lines[1].contains("not UTF-8")
                && serde_json::from_str::<serde_json::Value>(lines[1]).is_err()
        );
        assert!(lines[2].contains("the most rein acp reads"), "{}", lines[2]);
        assert_eq!(lines[3], "{\"ok\": 2}");
    }
}
