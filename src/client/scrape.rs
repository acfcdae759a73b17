//! Scrapes Prometheus endpoints (`--server-metrics`) at an interval for the length of a run:
//! one task per URL keeps each answer's text, or why there was none, with the instant it came.
//! A failure is one more entry, never the end of the run; parsing is `measure`'s.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One fetch: when it was answered (or failed), how long it took, the text or why not.
#[derive(Clone, Debug)]
pub struct Fetch {
    pub at: Instant,
    pub latency: Duration,
    pub body: Result<String, String>,
}

/// The fetches of one URL, in time order.
#[derive(Clone, Debug)]
pub struct Fetches {
    pub url: String,
    pub fetches: Vec<Fetch>,
}

/// Scraping under way; [`finish`](Self::finish) takes one last scrape of each URL and stops.
pub struct Scraper {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Fetches>>,
}

/// A fetch that takes longer than this fails (a stalled endpoint must not hold up the run's end).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

impl Scraper {
    /// Starts scraping each URL now and then every `interval`.
    pub fn start(urls: &[String], interval: Duration) -> Scraper {
        let (stop, stopped) = watch::channel(false);
        crate::proto::install_crypto_provider();
        let http = reqwest::Client::builder().no_proxy().timeout(FETCH_TIMEOUT).build().ok();
        let tasks = urls
            .iter()
            .map(|url| {
                let (url, http, mut stopped) = (url.clone(), http.clone(), stopped.clone());
                tokio::spawn(async move {
                    let mut fetches = Vec::new();
                    let mut ticks = tokio::time::interval(interval);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = ticks.tick() => fetches.push(fetch(http.as_ref(), &url).await),
                            _ = stopped.changed() => break,
                        }
                    }
                    fetches.push(fetch(http.as_ref(), &url).await);
                    Fetches { url, fetches }
                })
            })
            .collect();
        Scraper { stop, tasks }
    }

    pub async fn finish(self) -> Vec<Fetches> {
        let _ = self.stop.send(true);
        let mut all = Vec::new();
        for task in self.tasks {
            if let Ok(fetches) = task.await {
                all.push(fetches);
            }
        }
        all
    }
}

async fn fetch(http: Option<&reqwest::Client>, url: &str) -> Fetch {
    let sent = Instant::now();
    let body = match http {
        None => Err("cannot build an HTTP client".to_string()),
        Some(http) => match http.get(url).send().await {
            Err(e) => Err(root_cause(&e)),
            Ok(answer) if !answer.status().is_success() => Err(format!("HTTP {}", answer.status())),
            Ok(answer) => answer.text().await.map_err(|e| e.to_string()),
        },
    };
    Fetch { at: Instant::now(), latency: sent.elapsed(), body }
}

/// The innermost cause of an error ("Connection refused" rather than reqwest's "error sending
/// request").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `host:port`, `host:port/path` or a URL, as AIPerf takes `--server-metrics`; a URL without a
/// path gets `/metrics`.
pub fn metrics_url(given: &str) -> String {
    let url = if given.contains("://") { given.to_string() } else { format!("http://{given}") };
    let after_scheme = url.split_once("://").map_or("", |(_, rest)| rest);
    if after_scheme.contains('/') {
        url
    } else {
        format!("{url}/metrics")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_aiperfs_defaults() {
        assert_eq!(metrics_url("node1:8081"), "http://node1:8081/metrics");
        assert_eq!(metrics_url("node2:9090/metrics"), "http://node2:9090/metrics");
        assert_eq!(metrics_url("https://h:1/custom"), "https://h:1/custom");
        assert_eq!(metrics_url("http://h:1"), "http://h:1/metrics");
    }

    #[tokio::test]
    async fn a_dead_endpoint_is_a_failed_fetch_not_an_error() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let scraper = Scraper::start(&[format!("http://127.0.0.1:{port}/metrics")], Duration::from_millis(10));
        let fetches = scraper.finish().await;
        assert_eq!(fetches.len(), 1);
        assert!(!fetches[0].fetches.is_empty());
        assert!(fetches[0].fetches.iter().all(|f| f.body.is_err()), "{:?}", fetches[0].fetches);
    }
}
