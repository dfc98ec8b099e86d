//! The HTTP listener (`[http]`): the dashboard at `/` (and its files under `/assets/`),
//! `/metrics` in the Prometheus text format, `/api/v1/status` and `/api/v1/arrays/NAME`
//! (the JSON of `raidd status --json` and `raidd detail NAME --json`). It runs on the main thread beside the control socket, off the data path: a
//! request reads the same counters `raidd status` reads, and no worker waits for it.
//!
//! Bounded like every other listener: at most [`MAX_CONNECTIONS`] at once (one more is
//! answered 503 and closed, with a log line), a request head of at most [`MAX_HEAD`] bytes
//! that must arrive within [`HEAD_TIMEOUT`], a reply that must be taken within
//! [`SEND_TIMEOUT`]; one request per connection (`Connection: close`). Reading is all it
//! does: every other method is refused.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures::future::{self, Either};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_rt::net::{Part, Stream, TcpListener};
use std::sync::Arc;

use crate::config::HttpConfig;
use crate::ctx::ControlCtx;
use crate::link::{Input, Link};
use crate::watch::Watch;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes of a request line and headers.
pub const MAX_HEAD: usize = 8192;
/// How long the request head may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the client may take to receive the reply.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client refused for being one too many may take to send its head.
const BUSY_READ: Duration = Duration::from_secs(1);

pub fn bind(cfg: &HttpConfig) -> AdminResult<TcpListener> {
    TcpListener::bind(cfg.listen)
        .map_err(|e| AdminError::io(format!("cannot listen for HTTP on {}", cfg.listen), &e))
}

/// Answers HTTP connections, each on a task of its own, until dropped.
/// `tls`: every connection is HTTPS (`[http.tls]`).
pub async fn serve(
    listener: TcpListener,
    ctx: Rc<ControlCtx>,
    node_md_compat: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let open = Rc::new(Cell::new(0usize));
    let refusing = Rc::new(Cell::new(0usize));
    let limits = ctx.shared.limits;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                raidd_rt::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.get() >= MAX_CONNECTIONS {
            tracing::warn!("HTTP: {MAX_CONNECTIONS} connections open; refusing one more");
            if refusing.get() >= MAX_CONNECTIONS || tls.is_some() {
                // As many refusals in progress too, or a TLS client (a plain answer would
                // be garbage to it): this one is closed unanswered.
                continue;
            }
            let busy = response(503, TEXT, b"busy\n");
            // Its head is read first (briefly): closing on unread bytes would reset the
            // connection before the client read the answer.
            refusing.set(refusing.get() + 1);
            let refusing = refusing.clone();
            raidd_rt::spawn_local(async move {
                let mut input = Input::new(Watch::new(stream.clone(), limits));
                let link = Link::plain(stream.clone());
                let _ = within(BUSY_READ, input.until(&link, b"\r\n\r\n", MAX_HEAD)).await;
                let _ = within(BUSY_READ, stream.write_all(busy)).await;
                refusing.set(refusing.get() - 1);
            });
            continue;
        }
        open.set(open.get() + 1);
        let (ctx, open, tls) = (ctx.clone(), open.clone(), tls.clone());
        raidd_rt::spawn_local(async move {
            if let Err(e) = connection(&stream, &ctx, node_md_compat, tls).await {
                tracing::debug!("HTTP connection: {e}");
            }
            open.set(open.get() - 1);
        });
    }
}

/// Runs `op` for at most `limit`; `None` when it did not end in time.
async fn within<T>(limit: Duration, op: impl std::future::Future<Output = T>) -> Option<T> {
    let timeout = raidd_rt::time::sleep(limit);
    futures::pin_mut!(op, timeout);
    match future::select(op, timeout).await {
        Either::Left((v, _)) => Some(v),
        Either::Right(_) => None,
    }
}

async fn connection(
    stream: &Stream,
    ctx: &ControlCtx,
    compat: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let mut input = Input::new(Watch::new(stream.clone(), ctx.shared.limits));
    let mut link = Link::plain(stream.clone());
    let head = async {
        if let Some(config) = tls {
            link.start_tls(config, &mut input).await?;
        }
        input.until(&link, b"\r\n\r\n", MAX_HEAD).await
    };
    let Some(head) = within(HEAD_TIMEOUT, head).await else {
        return Ok(());
    };
    let reply = match parse_head(&head?) {
        Head::Request {
            method,
            path,
            accept,
        } => {
            let page = route(&method, &path);
            let om = crate::metrics::wants_openmetrics(accept.as_deref());
            let mut reply = answer(ctx, page, compat, om).await;
            if method == "HEAD" {
                reply.truncate(head_len(&reply));
            }
            reply
        }
        Head::TooLarge => response(431, TEXT, b"request head too large\n"),
        Head::Bad(why) => response(400, TEXT, format!("bad request: {why}\n").as_bytes()),
    };
    within(SEND_TIMEOUT, link.send(vec![Part::Bytes(reply)]))
        .await
        .unwrap_or(Ok(()))
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// A request head, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    Request {
        method: String,
        path: String,
        /// The Accept header, when there is one.
        accept: Option<String>,
    },
    TooLarge,
    Bad(String),
}

/// Parses a request head (pure): its method and path (the query, if any, dropped).
pub(crate) fn parse_head(bytes: &[u8]) -> Head {
    if bytes.len() > MAX_HEAD {
        return Head::TooLarge;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Head::Bad("incomplete request head".into()),
        Err(e) => return Head::Bad(e.to_string()),
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Head::Bad("no request line".into());
    };
    let path = target.split(['?', '#']).next().unwrap_or("").to_string();
    let accept = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("accept"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Head::Request {
        method: method.to_string(),
        path,
        accept,
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Dashboard,
    /// A file of the dashboard's, by name.
    Asset(String),
    Metrics,
    Status,
    Array(String),
    NotFound,
    /// Anything but GET and HEAD.
    NotAllowed,
}

/// Which page a method and path name (pure).
pub(crate) fn route(method: &str, path: &str) -> Route {
    if method != "GET" && method != "HEAD" {
        return Route::NotAllowed;
    }
    if let Some(name) = path.strip_prefix("/assets/") {
        return Route::Asset(name.to_string());
    }
    match path {
        "/" | "/index.html" => Route::Dashboard,
        "/metrics" => Route::Metrics,
        "/api/v1/status" => Route::Status,
        _ => match path.strip_prefix("/api/v1/arrays/") {
            Some(name) if !name.is_empty() && !name.contains('/') => {
                Route::Array(percent_decode(name))
            }
            _ => Route::NotFound,
        },
    }
}

/// `%XX` escapes decoded (array names are plain, but a client may escape them); a broken
/// escape is kept as it is.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bytes of a response's head (through the blank line).
fn head_len(reply: &[u8]) -> usize {
    reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(reply.len(), |p| p + 4)
}

/// The response to a request for `route`; `/metrics` in OpenMetrics when `om` (the client
/// asked for it), else in the older text format.
async fn answer(ctx: &ControlCtx, route: Route, compat: bool, om: bool) -> Vec<u8> {
    match route {
        Route::Metrics => {
            let report = crate::status::report(ctx).await;
            let body =
                crate::metrics::encode(&report, compat, crate::frontends::Frontends::metrics);
            if om {
                response(200, crate::metrics::CONTENT_TYPE, body.as_bytes())
            } else {
                let body = crate::metrics::classic(&body);
                response(200, crate::metrics::CLASSIC_CONTENT_TYPE, body.as_bytes())
            }
        }
        Route::Status => {
            let report = crate::status::report(ctx).await;
            json(200, &serde_json::to_value(&report).unwrap_or_default())
        }
        Route::Array(name) => match crate::control::detail_json(ctx, &name).await {
            Ok(j) => json(200, &j),
            Err(e) => json(
                404,
                &serde_json::json!({ "error": e.message, "exit": e.exit.code() }),
            ),
        },
        Route::Dashboard => {
            let report = crate::status::report(ctx).await;
            response(200, HTML, crate::dashboard::page(&report).as_bytes())
        }
        Route::Asset(name) => match crate::dashboard::asset(&name) {
            Some((ct, bytes)) => response(200, ct, bytes),
            None => response(404, TEXT, b"not found\n"),
        },
        Route::NotFound => response(404, TEXT, b"not found\n"),
        Route::NotAllowed => response(405, TEXT, b"only GET and HEAD\n"),
    }
}

fn json(status: u16, v: &serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(v).unwrap_or_default();
    body.push(b'\n');
    response(status, JSON, &body)
}

/// A whole response (pure): status line, headers, body.
pub(crate) fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    debug_assert!(!reason.is_empty(), "status {status} has its reason phrase");
    debug_assert!(
        !content_type.contains(['\r', '\n']),
        "a content type is one header line"
    );
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         Content-Security-Policy: default-src 'self'\r\n",
        body.len()
    )
    .into_bytes();
    if status == 405 {
        out.extend_from_slice(b"Allow: GET, HEAD\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/metrics"), Route::Metrics);
        assert_eq!(route("HEAD", "/api/v1/status"), Route::Status);
        assert_eq!(
            route("GET", "/api/v1/arrays/vol"),
            Route::Array("vol".into())
        );
        assert_eq!(
            route("GET", "/api/v1/arrays/a%20b"),
            Route::Array("a b".into())
        );
        assert_eq!(route("GET", "/api/v1/arrays/"), Route::NotFound);
        assert_eq!(route("GET", "/api/v1/arrays/a/b"), Route::NotFound);
        assert_eq!(route("POST", "/metrics"), Route::NotAllowed);
        assert_eq!(route("GET", "/nothing"), Route::NotFound);
        assert_eq!(route("GET", "/"), Route::Dashboard);
        assert_eq!(
            route("GET", "/assets/dashboard.js"),
            Route::Asset("dashboard.js".into())
        );
    }

    #[test]
    fn heads() {
        assert_eq!(
            parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Head::Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: None,
            }
        );
        assert!(matches!(
            parse_head(b"GET /metrics HTTP/1.1\r\n"),
            Head::Bad(_)
        ));
        assert!(matches!(parse_head(b"\x00\x01 junk\r\n\r\n"), Head::Bad(_)));
        assert_eq!(parse_head(&vec![b'a'; MAX_HEAD + 1]), Head::TooLarge);
    }

    #[test]
    fn a_response_says_its_length_and_closes() {
        let r = String::from_utf8(response(200, TEXT, b"hello")).unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Length: 5\r\n") && r.contains("Connection: close\r\n"));
        assert!(r.ends_with("\r\n\r\nhello"));
    }

    proptest! {
        /// No input makes the parser or the decoder panic.
        #[test]
        fn any_bytes_parse_to_something(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_head(&b);
            let _ = percent_decode(&String::from_utf8_lossy(&b));
        }
    }
}
