//! The viewer's HTTP server: the routes, what a request may ask (GET and HEAD only, a known
//! host, numbers where numbers go), and the answers: the one page, or JSON from
//! [`super::data`], with a status that says what went wrong. Nothing of a request becomes a
//! file path: runs are numbers looked up in `metadata.db`, filters go through the same SQL
//! guards as `--where`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::data::{MAX_STEPS_PAGE, Problem, RunsQuery, Source};
use crate::Param;
use crate::pack::query::RunOrder;

/// The page: runs table and run view, its CSS and script inline (no request elsewhere).
const PAGE: &str = include_str!("page.html");

/// Runs on a page of the table when the request does not say.
const DEFAULT_RUNS: u64 = 50;
/// Steps one request for a run's rows gets when it does not say.
const DEFAULT_STEPS: u64 = 1_000;

/// The routes over `source`. `hosts` are the names a request's `Host` may carry (an empty
/// list lets any through: the server listens on every address).
pub fn router(source: Arc<Source>, hosts: Vec<String>) -> Router {
    let api = Router::new()
        .route("/", get(page))
        .route("/run/{id}", get(run_page))
        .route("/api/pack", get(pack))
        .route("/api/runs", get(runs))
        .route("/api/runs/{id}", get(run))
        .route("/api/runs/{id}/timeline", get(timeline))
        .route("/api/runs/{id}/disagreements", get(disagreements))
        .fallback(not_found)
        .with_state(source);
    api.layer(middleware::from_fn_with_state(Arc::new(hosts), guard))
}

/// GET and HEAD only (405 otherwise, before anything is read), from a known host (a page
/// elsewhere cannot reach this server by rebinding a name of its own to 127.0.0.1).
async fn guard(State(hosts): State<Arc<Vec<String>>>, req: Request, next: Next) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = problem(Problem {
            status: 405,
            message: format!(
                "{} is not allowed: the viewer only reads (GET and HEAD)",
                req.method()
            ),
        });
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if !hosts.is_empty() {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !hosts.iter().any(|h| host_name(host) == h) {
            return problem(Problem {
                status: 403,
                message: format!(
                    "Host {host:?} is not this server's name ({}); open it by the address it printed",
                    hosts.join(", ")
                ),
            });
        }
    }
    next.run(req).await
}

/// `127.0.0.1:8048` → `127.0.0.1`, `[::1]:8048` → `[::1]`, `localhost` → `localhost`.
fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        Some(at) if !host[at..].contains(']') => &host[..at],
        _ => host,
    }
}

async fn page() -> Response {
    html(StatusCode::OK)
}

/// The page for `/run/<id>[?step=k]`: 404 (with the same page, which says why) when the run or
/// the step is not in the pack.
async fn run_page(
    State(source): State<Arc<Source>>,
    Path(id): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let id = match run_id(&id) {
        Ok(id) => id,
        Err(_) => return html(StatusCode::NOT_FOUND),
    };
    let step = match pairs.iter().find(|(k, _)| k == "step") {
        None => None,
        Some((_, v)) => match v.parse::<u64>() {
            Ok(k) => Some(k),
            Err(_) => return html(StatusCode::NOT_FOUND),
        },
    };
    match answer(source, move |s| {
        s.check_step(id, step).map(|()| Value::Null)
    })
    .await
    {
        Ok(_) => html(StatusCode::OK),
        Err(p) => html(StatusCode::from_u16(p.status).unwrap_or(StatusCode::NOT_FOUND)),
    }
}

async fn pack(State(source): State<Arc<Source>>) -> Response {
    respond(answer(source, |s| s.pack_json()).await)
}

async fn runs(
    State(source): State<Arc<Source>>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    match runs_query(&pairs) {
        Ok(q) => respond(answer(source, move |s| s.runs_json(&q)).await),
        Err(p) => problem(p),
    }
}

async fn run(
    State(source): State<Arc<Source>>,
    Path(id): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let request = run_id(&id).and_then(|id| {
        known_keys(&pairs, &["from", "limit"])?;
        let from = number(&pairs, "from")?;
        let limit = number(&pairs, "limit")?.unwrap_or(DEFAULT_STEPS);
        Ok((id, from, limit))
    });
    match request {
        Ok((id, from, limit)) => {
            respond(answer(source, move |s| s.run_json(id, from, limit)).await)
        }
        Err(p) => problem(p),
    }
}

async fn timeline(State(source): State<Arc<Source>>, Path(id): Path<String>) -> Response {
    match run_id(&id) {
        Ok(id) => respond(answer(source, move |s| s.timeline_json(id)).await),
        Err(p) => problem(p),
    }
}

async fn disagreements(State(source): State<Arc<Source>>, Path(id): Path<String>) -> Response {
    match run_id(&id) {
        Ok(id) => respond(answer(source, move |s| s.disagreements_json(id)).await),
        Err(p) => problem(p),
    }
}

async fn not_found(req: Request) -> Response {
    problem(Problem::not_found(format!(
        "nothing at {}: the viewer serves /, /run/<id>, and /api/pack, /api/runs, \
         /api/runs/<id>, /api/runs/<id>/timeline, /api/runs/<id>/disagreements",
        req.uri().path()
    )))
}

/// Runs `f` on a thread that may block (it reads the pack), and waits for its answer.
async fn answer<F>(source: Arc<Source>, f: F) -> Result<Value, Problem>
where
    F: FnOnce(&Source) -> Result<Value, Problem> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f(&source))
        .await
        .unwrap_or_else(|e| {
            Err(Problem {
                status: 500,
                message: format!("the request failed: {e}"),
            })
        })
}

fn respond(result: Result<Value, Problem>) -> Response {
    match result {
        Ok(v) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&v).unwrap_or_default(),
        )
            .into_response(),
        Err(p) => problem(p),
    }
}

/// `{"error": message, "status": n}` with that status.
fn problem(p: Problem) -> Response {
    let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": p.message, "status": p.status}).to_string(),
    )
        .into_response()
}

fn html(status: StatusCode) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        PAGE,
    )
        .into_response()
}

/// A run id from the path: a number, or 404.
fn run_id(text: &str) -> Result<u64, Problem> {
    text.parse::<u64>().map_err(|_| {
        Problem::not_found(format!(
            "no run {text:?}: runs are named by their id, a number (/run/7)"
        ))
    })
}

/// `GET /api/runs`' parameters: `where` (the SQL `--where` takes), `param` (repeatable, as
/// `--param`), `order` (a column, `-column` descending), `offset`, `limit`.
fn runs_query(pairs: &[(String, String)]) -> Result<RunsQuery, Problem> {
    known_keys(pairs, &["where", "param", "order", "offset", "limit"])?;
    let sql = pairs
        .iter()
        .find(|(k, _)| k == "where")
        .map(|(_, v)| v.clone())
        .filter(|v| !v.trim().is_empty());
    let params = pairs
        .iter()
        .filter(|(k, _)| k == "param")
        .map(|(_, v)| Param::parse(v).map_err(|e| Problem::bad_request(format!("param: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if sql.is_none() && !params.is_empty() {
        return Err(Problem::bad_request("param is given without where"));
    }
    let order = match pairs.iter().find(|(k, _)| k == "order") {
        Some((_, v)) if !v.is_empty() => {
            RunOrder::parse(v).map_err(|e| Problem::bad_request(format!("order: {e}")))?
        }
        _ => RunOrder::default(),
    };
    Ok(RunsQuery {
        sql,
        params,
        order,
        offset: number(pairs, "offset")?.unwrap_or(0),
        limit: number(pairs, "limit")?.unwrap_or(DEFAULT_RUNS),
    })
}

/// Refuses a parameter the endpoint does not know (a typo would otherwise be ignored).
fn known_keys(pairs: &[(String, String)], known: &[&str]) -> Result<(), Problem> {
    match pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(Problem::bad_request(format!(
            "unknown parameter {k:?}; this endpoint takes {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A whole-number parameter, if given once.
fn number(pairs: &[(String, String)], key: &str) -> Result<Option<u64>, Problem> {
    let mut given = pairs.iter().filter(|(k, _)| k == key);
    match (given.next(), given.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(Problem::bad_request(format!("{key} is given twice"))),
        (Some((_, v)), None) => v.parse().map(Some).map_err(|_| {
            Problem::bad_request(format!(
                "{key}={v:?} is not a whole number{}",
                if key == "limit" {
                    format!(" (at most {MAX_STEPS_PAGE} steps, or 500 runs)")
                } else {
                    String::new()
                }
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:8048"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8048"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("localhost"), "localhost");
    }

    #[test]
    fn runs_queries_refuse_what_they_do_not_know() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let q = runs_query(&pairs(&[
            ("where", "depth = ?"),
            ("param", "7"),
            ("order", "-steps"),
        ]))
        .unwrap();
        assert_eq!(q.params.len(), 1);
        assert!(q.order.descending);
        assert_eq!(q.limit, DEFAULT_RUNS);
        assert!(runs_query(&pairs(&[("wher", "1")])).is_err());
        assert!(runs_query(&pairs(&[("param", "7")])).is_err());
        assert!(runs_query(&pairs(&[("limit", "ten")])).is_err());
        assert!(runs_query(&pairs(&[("offset", "1"), ("offset", "2")])).is_err());
    }
}
