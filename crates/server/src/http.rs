//! The HTTP listener (`[http]`): the dashboard at `/` (and its files under `/assets/`),
//! `/metrics` in the Prometheus text format, `/api/v1/status` and `/api/v1/arrays/NAME`
//! (the JSON of `raidd status --json` and `raidd detail NAME --json`). It runs on the main thread beside the control socket, off the data path: a
//! request reads the same counters `raidd status` reads, and no worker waits for it.
//!
//! Bounded like every other listener: at most [`MAX_CONNECTIONS`] at once (one more is
//! answered 503 and closed, with a log line), a request head of at most [`MAX_HEAD`] bytes
//! that must arrive within [`HEAD_TIMEOUT`], a reply that must be taken within
//! [`SEND_TIMEOUT`]; one request per connection (`Connection: close`), a POST's body at
//! most [`MAX_BODY`] bytes. Who may read and act is `http_auth`'s: reads are open on
//! loopback unless configured otherwise; actions (`POST /api/v1/arrays/NAME/actions`: fail,
//! add, check, repair, idle; forms of the dashboard's or JSON) need the token, and a
//! browser's session also the page's CSRF value. `POST /login` turns the token into that
//! session.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures::future::{self, Either};
use raidd_admin::exit::{AdminError, AdminResult};
use raidd_rt::net::{Part, Stream, TcpListener};
use std::sync::Arc;

use crate::config::HttpConfig;
use crate::ctx::ControlCtx;
use crate::dashboard::Ui;
use crate::http_auth::{Auth, Credentials, Need, Verdict};
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
/// Bytes of a POST's body (an action or a login).
pub const MAX_BODY: usize = 4096;

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
    auth: Rc<Auth>,
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
        let (ctx, open, tls, auth) = (ctx.clone(), open.clone(), tls.clone(), auth.clone());
        raidd_rt::spawn_local(async move {
            if let Err(e) = connection(&stream, &ctx, node_md_compat, tls, &auth).await {
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
    auth: &Auth,
) -> std::io::Result<()> {
    let mut input = Input::new(Watch::new(stream.clone(), ctx.shared.limits));
    let mut link = Link::plain(stream.clone());
    let secure = tls.is_some();
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
        Head::Request(req) => {
            let page = route(&req.method, &req.path);
            let body = if req.method == "POST" {
                match req.content_length {
                    None => Err(response(411, TEXT, b"a POST needs Content-Length\n")),
                    Some(n) if n > MAX_BODY => Err(response(413, TEXT, b"body too large\n")),
                    Some(n) => match within(HEAD_TIMEOUT, input.exact(&link, n)).await {
                        Some(Ok(b)) => Ok(b),
                        _ => return Ok(()),
                    },
                }
            } else {
                Ok(Vec::new())
            };
            match body {
                Ok(body) => {
                    debug_assert!(body.len() <= MAX_BODY, "a body within its bound");
                    let asked = Asked {
                        fields: fields(req.content_type.as_deref(), &body),
                        form: req
                            .content_type
                            .as_deref()
                            .is_none_or(|c| !c.contains("json")),
                        secure,
                    };
                    let mut creds = req.creds.clone();
                    if creds.csrf.is_none() {
                        creds.csrf = asked.field("csrf").map(str::to_string);
                    }
                    let om = crate::metrics::wants_openmetrics(req.accept.as_deref());
                    let mut reply = match auth.check(need(&page), &creds) {
                        Verdict::Allowed { session } => {
                            let ui = match (auth.has_token(), session) {
                                (false, _) => Ui::Look,
                                (true, false) => Ui::LogIn,
                                (true, true) => Ui::Act { csrf: auth.csrf() },
                            };
                            answer(ctx, page, compat, om, &asked, auth, ui).await
                        }
                        Verdict::Unauthorized if page == Route::Dashboard => {
                            response(200, HTML, crate::dashboard::login_page(None).as_bytes())
                        }
                        Verdict::Unauthorized => response_with(
                            401,
                            TEXT,
                            b"the token is needed: Authorization: Bearer TOKEN\n",
                            &[("WWW-Authenticate", "Bearer realm=\"raidd\"")],
                        ),
                        Verdict::Forbidden(why) => {
                            tracing::warn!(path = %req.path, "HTTP: refused: {why}");
                            response(403, TEXT, format!("{why}\n").as_bytes())
                        }
                    };
                    if req.method == "HEAD" {
                        reply.truncate(head_len(&reply));
                    }
                    reply
                }
                Err(reply) => reply,
            }
        }
        Head::TooLarge => response(431, TEXT, b"request head too large\n"),
        Head::Bad(why) => response(400, TEXT, format!("bad request: {why}\n").as_bytes()),
    };
    within(SEND_TIMEOUT, link.send(vec![Part::Bytes(reply)]))
        .await
        .unwrap_or(Ok(()))
}

/// A POST's fields and how it came.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    fields: Vec<(String, String)>,
    /// From a form (answered with a redirect back to the page), not JSON.
    form: bool,
    /// Over TLS (a session cookie is then Secure).
    secure: bool,
}

impl Asked {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A body's fields (pure): a JSON object's strings, or an HTML form's (urlencoded).
pub(crate) fn fields(content_type: Option<&str>, body: &[u8]) -> Vec<(String, String)> {
    if content_type.is_some_and(|c| c.contains("json")) {
        let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) else {
            return Vec::new();
        };
        return o
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string())))
            .collect();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (form_decode(k), form_decode(v)))
        .collect()
}

/// `+` and `%XX` decoded, as forms encode them.
fn form_decode(s: &str) -> String {
    percent_decode(&s.replace('+', " "))
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const HTML: &str = "text/html; charset=utf-8";

/// A request head, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    Request(Box<Request>),
    TooLarge,
    Bad(String),
}

/// A request's line and the headers raidd reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    /// The Accept header, when there is one.
    pub accept: Option<String>,
    pub content_length: Option<usize>,
    pub content_type: Option<String>,
    /// Who sent it, as far as the headers say.
    pub creds: Credentials,
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
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let content_length = match header("content-length") {
        None => None,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return Head::Bad("Content-Length is not a number".into()),
        },
    };
    Head::Request(Box::new(Request {
        method: method.to_string(),
        path,
        accept: header("accept"),
        content_length,
        content_type: header("content-type"),
        creds: Credentials {
            authorization: header("authorization"),
            cookie: header("cookie"),
            csrf: header("x-raidd-csrf"),
            origin: header("origin"),
            host: header("host"),
        },
    }))
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
    /// The login form, and the token posted to it.
    LoginForm,
    Login,
    /// An action on the served array of this name.
    Action(String),
    NotFound,
    /// A method the path does not take.
    NotAllowed,
}

/// What a route needs of the client (pure).
pub(crate) fn need(r: &Route) -> Need {
    match r {
        Route::Dashboard | Route::Metrics | Route::Status | Route::Array(_) => Need::Read,
        Route::Action(_) => Need::Act,
        Route::Asset(_) | Route::LoginForm | Route::Login | Route::NotFound | Route::NotAllowed => {
            Need::Nothing
        }
    }
}

/// Which page a method and path name (pure).
pub(crate) fn route(method: &str, path: &str) -> Route {
    if method == "POST" {
        if path == "/login" {
            return Route::Login;
        }
        return match path
            .strip_prefix("/api/v1/arrays/")
            .and_then(|p| p.strip_suffix("/actions"))
        {
            Some(name) if !name.is_empty() && !name.contains('/') => {
                Route::Action(percent_decode(name))
            }
            _ => Route::NotAllowed,
        };
    }
    if method != "GET" && method != "HEAD" {
        return Route::NotAllowed;
    }
    if path == "/login" {
        return Route::LoginForm;
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

/// The response to a request for `route` (allowed); `/metrics` in OpenMetrics when `om`
/// (the client asked for it), else in the older text format; `ui`: what the dashboard
/// offers the viewer.
async fn answer(
    ctx: &ControlCtx,
    route: Route,
    compat: bool,
    om: bool,
    asked: &Asked,
    auth: &Auth,
    ui: Ui<'_>,
) -> Vec<u8> {
    match route {
        Route::LoginForm => response(200, HTML, crate::dashboard::login_page(None).as_bytes()),
        Route::Login => login(asked, auth),
        Route::Action(name) => action(ctx, &name, asked).await,
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
            response(200, HTML, crate::dashboard::page(&report, ui).as_bytes())
        }
        Route::Asset(name) => match crate::dashboard::asset(&name) {
            Some((ct, bytes)) => response(200, ct, bytes),
            None => response(404, TEXT, b"not found\n"),
        },
        Route::NotFound => response(404, TEXT, b"not found\n"),
        Route::NotAllowed => response(
            405,
            TEXT,
            b"only GET and HEAD (POST: /login and /api/v1/arrays/NAME/actions)\n",
        ),
    }
}

/// `POST /login`: the token turned into a session cookie, and back to the dashboard.
fn login(asked: &Asked, auth: &Auth) -> Vec<u8> {
    if !auth.has_token() {
        return response(403, TEXT, b"no token is configured: set http.token_file\n");
    }
    match asked.field("token") {
        Some(t) if auth.is_token(t) => {
            debug_assert!(auth.has_token(), "only a configured token matches");
            tracing::info!("HTTP: a dashboard session logged in");
            response_with(
                303,
                TEXT,
                b"logged in\n",
                &[
                    ("Location", "/"),
                    ("Set-Cookie", &auth.session_cookie(asked.secure)),
                ],
            )
        }
        _ => {
            tracing::warn!("HTTP: a login with a wrong token");
            response(
                401,
                HTML,
                crate::dashboard::login_page(Some("That is not the token.")).as_bytes(),
            )
        }
    }
}

/// What an action asks of the control handlers (pure): fail, add, check, repair, idle.
pub(crate) fn action_request(
    array: &str,
    asked: &Asked,
) -> Result<raidd_admin::control::Request, String> {
    use raidd_admin::control::Request;
    let array = array.to_string();
    let member = || {
        asked
            .field("member")
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .ok_or_else(|| "this action needs a member".to_string())
    };
    match asked.field("action") {
        Some("check") => Ok(Request::Check { array }),
        Some("repair") => Ok(Request::Repair { array }),
        Some("idle") => Ok(Request::Idle { array }),
        Some("fail") => Ok(Request::Fail {
            array,
            member: member()?,
        }),
        Some("add") => Ok(Request::Add {
            array,
            member: member()?.into(),
            journal: false,
        }),
        Some(a) => Err(format!("no action {a:?}: fail, add, check, repair or idle")),
        None => Err("no action given: fail, add, check, repair or idle".into()),
    }
}

/// `POST /api/v1/arrays/NAME/actions`: done through the control handlers, as the CLI's
/// would be; a form is sent back to the dashboard, JSON gets the answer.
async fn action(ctx: &ControlCtx, array: &str, asked: &Asked) -> Vec<u8> {
    let req = match action_request(array, asked) {
        Ok(r) => r,
        Err(e) => return json(400, &serde_json::json!({ "error": e, "exit": 2 })),
    };
    tracing::info!(%array, request = ?req, "HTTP: action");
    let resp = crate::control::answer(ctx, req).await;
    if resp.exit == 0 && asked.form {
        return response_with(303, TEXT, resp.text.as_bytes(), &[("Location", "/")]);
    }
    if resp.exit == 0 {
        return json(
            200,
            &serde_json::json!({ "text": resp.text, "result": resp.json }),
        );
    }
    let status = match raidd_admin::exit::Exit::from_code(resp.exit) {
        raidd_admin::exit::Exit::Usage => 400,
        raidd_admin::exit::Exit::NotFound => 404,
        raidd_admin::exit::Exit::Conflict => 409,
        _ => 500,
    };
    json(
        status,
        &serde_json::json!({ "error": resp.error, "exit": resp.exit }),
    )
}

fn json(status: u16, v: &serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(v).unwrap_or_default();
    body.push(b'\n');
    response(status, JSON, &body)
}

/// A whole response (pure): status line, headers, body.
pub(crate) fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    response_with(status, content_type, body, &[])
}

/// A whole response with `extra` headers.
pub(crate) fn response_with(
    status: u16,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
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
        out.extend_from_slice(b"Allow: GET, HEAD, POST\r\n");
    }
    for (k, v) in extra {
        debug_assert!(!v.contains(['\r', '\n']), "a header is one line");
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
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
        assert_eq!(route("POST", "/login"), Route::Login);
        assert_eq!(route("GET", "/login"), Route::LoginForm);
        assert_eq!(
            route("POST", "/api/v1/arrays/a%20b/actions"),
            Route::Action("a b".into())
        );
        assert_eq!(route("POST", "/api/v1/arrays//actions"), Route::NotAllowed);
        assert_eq!(route("PUT", "/api/v1/arrays/a/actions"), Route::NotAllowed);
        assert_eq!(need(&Route::Action("a".into())), Need::Act);
        assert_eq!(need(&Route::Metrics), Need::Read);
        assert_eq!(need(&Route::Asset("x".into())), Need::Nothing);
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
            Head::Request(Box::new(Request {
                method: "GET".into(),
                path: "/metrics".into(),
                creds: Credentials {
                    host: Some("a".into()),
                    ..Default::default()
                },
                ..Default::default()
            }))
        );
        let Head::Request(r) = parse_head(
            b"POST /login HTTP/1.1\r\nContent-Length: 12\r\nCookie: a=b\r\n\
              X-Raidd-CSRF: c\r\nAuthorization: Bearer t\r\n\r\n",
        ) else {
            panic!("a request")
        };
        assert_eq!(r.content_length, Some(12));
        assert_eq!(r.creds.cookie.as_deref(), Some("a=b"));
        assert_eq!(r.creds.csrf.as_deref(), Some("c"));
        assert_eq!(r.creds.authorization.as_deref(), Some("Bearer t"));
        assert!(matches!(
            parse_head(b"POST /login HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Head::Bad(_)
        ));
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

    #[test]
    fn bodies_and_actions() {
        let f = fields(
            Some("application/x-www-form-urlencoded"),
            b"action=fail&member=%2Fdev%2Fsdb+1&csrf=x",
        );
        let asked = Asked {
            fields: f,
            ..Default::default()
        };
        assert_eq!(asked.field("member"), Some("/dev/sdb 1"));
        assert_eq!(
            action_request("vol", &asked),
            Ok(raidd_admin::control::Request::Fail {
                array: "vol".into(),
                member: "/dev/sdb 1".into()
            })
        );
        let j = Asked {
            fields: fields(Some("application/json"), br#"{"action":"check","n":1}"#),
            ..Default::default()
        };
        assert_eq!(
            action_request("vol", &j),
            Ok(raidd_admin::control::Request::Check {
                array: "vol".into()
            })
        );
        let none = Asked::default();
        assert!(action_request("vol", &none)
            .unwrap_err()
            .contains("no action"));
        let add = Asked {
            fields: vec![("action".into(), "add".into())],
            ..Default::default()
        };
        assert!(action_request("vol", &add).unwrap_err().contains("member"));
        assert!(fields(Some("application/json"), b"[1]").is_empty());
    }

    proptest! {
        /// No input makes the parser or the decoder panic.
        #[test]
        fn any_bytes_parse_to_something(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_head(&b);
            let _ = percent_decode(&String::from_utf8_lossy(&b));
            let _ = fields(Some("application/json"), &b);
            let _ = fields(None, &b);
        }
    }
}
