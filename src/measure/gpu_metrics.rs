//! `--collect-metrics`: the four GPU gauges perf_analyzer reads from a Triton metrics endpoint
//! (KSERVE_V2.md §11.1), scraped periodically while a sweep point is measured and summarised
//! per GPU: average utilization and power, peak memory used, total memory.

use crate::results::GpuFigures;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

/// One scrape: per-GPU values of the four gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub utilization: BTreeMap<String, f64>,
    pub power_w: BTreeMap<String, f64>,
    pub memory_used_bytes: BTreeMap<String, f64>,
    pub memory_total_bytes: BTreeMap<String, f64>,
}

/// Reads `name{gpu_uuid="..."} value` lines (exactly that one label, as perf_analyzer's regex
/// demands); other lines are ignored.
pub fn parse(text: &str) -> GpuSample {
    let mut sample = GpuSample::default();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once("{gpu_uuid=\"") else {
            continue;
        };
        let Some((uuid, rest)) = rest.split_once("\"} ") else {
            continue;
        };
        let Ok(value) = rest.trim().parse::<f64>() else {
            continue;
        };
        let map = match name {
            "nv_gpu_utilization" => &mut sample.utilization,
            "nv_gpu_power_usage" => &mut sample.power_w,
            "nv_gpu_memory_used_bytes" => &mut sample.memory_used_bytes,
            "nv_gpu_memory_total_bytes" => &mut sample.memory_total_bytes,
            _ => continue,
        };
        map.insert(uuid.to_string(), value);
    }
    sample
}

/// Per-GPU summary of the samples of one point.
pub fn summarise(samples: &[GpuSample]) -> GpuFigures {
    let mean = |pick: fn(&GpuSample) -> &BTreeMap<String, f64>| -> Vec<(String, f64)> {
        let mut sums: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
        for s in samples {
            for (uuid, v) in pick(s) {
                let e = sums.entry(uuid).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        sums.into_iter().map(|(k, (sum, n))| (k.to_string(), sum / n as f64)).collect()
    };
    let max = |pick: fn(&GpuSample) -> &BTreeMap<String, f64>| -> Vec<(String, u64)> {
        let mut peaks: BTreeMap<&str, f64> = BTreeMap::new();
        for s in samples {
            for (uuid, v) in pick(s) {
                let e = peaks.entry(uuid).or_insert(0.0);
                *e = e.max(*v);
            }
        }
        peaks.into_iter().map(|(k, v)| (k.to_string(), v as u64)).collect()
    };
    GpuFigures {
        utilization: mean(|s| &s.utilization),
        power_w: mean(|s| &s.power_w),
        max_memory_bytes: max(|s| &s.memory_used_bytes),
        total_memory_bytes: max(|s| &s.memory_total_bytes),
    }
}

/// Scrapes `url` every `interval` until [`finish`](Self::finish) is called.
pub struct GpuCollector {
    samples: Arc<Mutex<Vec<GpuSample>>>,
    task: JoinHandle<()>,
}

impl GpuCollector {
    /// Starts scraping on the current runtime. Failed scrapes are logged and skipped.
    pub fn start(http: reqwest::Client, url: String, interval: Duration) -> GpuCollector {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                match http.get(&url).send().await {
                    Ok(response) if response.status().is_success() => {
                        if let Ok(text) = response.text().await {
                            sink.lock().push(parse(&text));
                        }
                    }
                    Ok(response) => tracing::warn!("metrics {url}: HTTP {}", response.status()),
                    Err(e) => tracing::warn!("metrics {url}: {e}"),
                }
            }
        });
        GpuCollector { samples, task }
    }

    pub fn finish(self) -> GpuFigures {
        self.task.abort();
        summarise(&self.samples.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n\
# TYPE nv_gpu_utilization gauge\n\
nv_gpu_utilization{gpu_uuid=\"GPU-a\"} 0.500000\n\
nv_gpu_power_usage{gpu_uuid=\"GPU-a\"} 70.5\n\
nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-a\"} 1000.000000\n\
nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-a\"} 16000.000000\n\
nv_inference_count{model=\"m\",version=\"1\"} 5\n";

    #[test]
    fn gauges_are_parsed_per_gpu_and_summarised() {
        let a = parse(TEXT);
        assert_eq!(a.utilization["GPU-a"], 0.5);
        assert_eq!(a.memory_total_bytes["GPU-a"], 16000.0);
        let b = parse(&TEXT.replace("0.500000", "0.7").replace("1000.000000", "3000"));
        let figures = summarise(&[a, b]);
        assert_eq!(figures.utilization.len(), 1);
        assert!((figures.utilization[0].1 - 0.6).abs() < 1e-9);
        assert_eq!(figures.max_memory_bytes, vec![("GPU-a".to_string(), 3000)]);
        assert_eq!(figures.total_memory_bytes, vec![("GPU-a".to_string(), 16000)]);
    }

    #[test]
    fn a_server_without_gpus_gives_empty_figures() {
        assert_eq!(summarise(&[parse("nv_inference_count{model=\"m\",version=\"1\"} 5\n")]), GpuFigures::default());
    }
}
