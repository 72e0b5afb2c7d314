//! The benchmark report, `gpuplane-bench report`: every benchmark run
//! several times with the peers (MLflow, TensorBoard; `bench/peers.py`)
//! measured in the same run, written as `BENCHMARKS.md`, `benchmarks.json`
//! and `benchmarks.png` (drawn with plotters): the median, min and max of
//! each figure, its goal, and its ratio to the peer. `--smoke` runs it all
//! at toy sizes in seconds; the test command does, so no benchmark rots.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static SMOKE: AtomicBool = AtomicBool::new(false);
static MEASURED: Mutex<Vec<Measured>> = Mutex::new(Vec::new());

/// True in `--smoke` mode: toy sizes, figures that mean nothing.
pub fn smoke() -> bool {
    SMOKE.load(Ordering::Relaxed)
}

/// `full` in a real run, `small` in smoke mode.
pub fn size<T>(full: T, small: T) -> T {
    if smoke() { small } else { full }
}

/// One figure of one repetition, as a benchmark or `peers.py --json` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub id: String,
    pub what: String,
    pub unit: String,
    pub value: f64,
}

/// `1234567` as `1,234,567`, for the names of figures.
pub fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    grouped
}

/// Keeps a figure for the report (a benchmark also prints its own line).
pub fn record(id: &str, what: impl Into<String>, unit: &str, value: f64) {
    MEASURED.lock().unwrap_or_else(|e| e.into_inner()).push(Measured {
        id: id.into(),
        what: what.into(),
        unit: unit.into(),
        value,
    });
}

/// A line of the report: our figure, the peers' figures it is set against,
/// and the goal an issue gave it.
struct Row {
    ours: &'static str,
    peers: &'static [&'static str],
    goal: &'static str,
}

const fn row(ours: &'static str, peers: &'static [&'static str], goal: &'static str) -> Row {
    Row { ours, peers, goal }
}

/// The headline figures, in the report's order, each under its section.
const SECTIONS: &[(&str, &[Row])] = &[
    (
        "Metric ingest over HTTP",
        &[
            row("ingest.python.1", &["mlflow.ingest.1"], ""),
            row("ingest.python.4", &["mlflow.ingest.4"], ""),
            row("ingest.rust.1", &[], "≥ 1M points/s"),
            row("ingest.rust.2", &[], ""),
            row("ingest.rust.4", &[], ""),
            row("ingest.rust.2_over_1", &[], "≥ 1.8×"),
        ],
    ),
    (
        "Metric history and downsampled queries",
        &[
            row("history.small.sdk", &["mlflow.history.small"], "< 30 ms"),
            row("history.small.columns", &["mlflow.history.small"], ""),
            row("history.small.objects", &["mlflow.history.small"], ""),
            row("history.large.sdk", &["mlflow.history.large"], ""),
            row("downsample.small", &["mlflow.downsample.small"], ""),
            row("downsample.large", &["mlflow.downsample.large"], ""),
            row("downsample.1m", &[], "< 10 ms"),
            row("downsample.100m", &[], "< 20 ms"),
            row("zoom.1m", &[], ""),
        ],
    ),
    (
        "The unmodified mlflow client, to GPUPlane and to MLflow's server",
        &[
            row("mlflow_client.ingest.1", &["mlflow.ingest.1"], "≥ 50× MLflow"),
            row("mlflow_client.ingest.4", &["mlflow.ingest.4"], "≥ 50× MLflow"),
            row("mlflow_client.ingest.client_bound", &["mlflow.ingest.1"], ""),
            row(
                "mlflow_client.history.small",
                &["mlflow.history.small"],
                "≥ 50× MLflow",
            ),
            row(
                "mlflow_client.history.small.client_bound",
                &["mlflow.history.small"],
                "",
            ),
            row(
                "mlflow_client.history.large",
                &["mlflow.history.large"],
                "≥ 50× MLflow",
            ),
            row("mlflow_client.downsample.small", &["mlflow.downsample.small"], ""),
            row("mlflow_client.downsample.large", &["mlflow.downsample.large"], ""),
            row("mlflow_client.search", &["mlflow.search"], ""),
        ],
    ),
    (
        "TensorBoard event files",
        &[row(
            "tfevents.gpuplane",
            &[
                "tfevents.rustboard.crc",
                "tfevents.rustboard",
                "tfevents.accumulator",
            ],
            "≥ 5× the Rust data server",
        )],
    ),
    (
        "Bytes on disk a point",
        &[
            row("storage.training_run", &[], "≤ 6 B"),
            row(
                "storage.tfevents.gpuplane",
                &["storage.tfevents.file", "storage.mlflow"],
                "",
            ),
        ],
    ),
    (
        "Scheduling and dispatch",
        &[
            row("scheduling.pass", &[], "~25 ms"),
            row("scheduling.pass.gangs", &[], "< 50 ms"),
            row("scheduling.server_pass", &[], ""),
            row("dispatch.p50", &[], ""),
            row("dispatch.p99", &[], ""),
        ],
    ),
    (
        "Sweep controller (1,000 trials running at once)",
        &[
            row("sweeps.decisions", &[], ""),
            row("sweeps.look", &[], ""),
            row("sweeps.proposals", &[], ""),
            row("sweeps.pass_alone", &[], ""),
            row("sweeps.pass_beside", &[], ""),
        ],
    ),
    (
        "Logs",
        &[
            row("logs.ingest", &[], ""),
            row("logs.job", &[], ""),
            row("logs.live.p50", &[], ""),
            row("logs.live.p99", &[], ""),
        ],
    ),
    (
        "Console and runs",
        &[
            row("console.run_page", &[], ""),
            row("runs.page", &[], "< 100 ms"),
        ],
    ),
    (
        "Footprint",
        &[
            row("agent.idle_cpu", &[], ""),
            row("server.rss_idle", &[], ""),
            row("server.rss_queued", &[], ""),
        ],
    ),
    (
        "Cluster scale (simulated agents over the real HTTP protocol)",
        &[
            row("cluster.cpu_at_rest", &[], "< 25 % of a core"),
            row("cluster.rss", &[], ""),
            row("cluster.dispatch.p50", &[], ""),
            row("cluster.dispatch.p99", &[], "< 200 ms"),
        ],
    ),
];

/// Every repetition of one figure.
#[derive(Serialize)]
struct Figure {
    id: String,
    what: String,
    unit: String,
    higher_is_better: bool,
    samples: Vec<f64>,
    median: f64,
    min: f64,
    max: f64,
}

impl Figure {
    fn of(measured: &[&Measured]) -> Figure {
        let first = measured[0];
        let samples: Vec<f64> = measured.iter().map(|m| m.value).collect();
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[middle]
        } else {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        };
        Figure {
            id: first.id.clone(),
            what: first.what.clone(),
            unit: first.unit.clone(),
            higher_is_better: higher_is_better(&first.unit),
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            samples,
        }
    }
}

fn higher_is_better(unit: &str) -> bool {
    unit.ends_with("/s") || unit == "×"
}

/// How many times better ours is than the peer (above 1: ours is better).
fn advantage(ours: &Figure, peer: &Figure) -> f64 {
    if ours.higher_is_better {
        ours.median / peer.median
    } else {
        peer.median / ours.median
    }
}

#[derive(Serialize)]
struct Comparison {
    section: String,
    ours: String,
    peer: String,
    /// How many times better ours is (above 1: better).
    advantage: f64,
}

#[derive(Serialize)]
struct Machine {
    cores: usize,
    memory_gib: f64,
    cpu: String,
}

#[derive(Serialize)]
struct ReportFile {
    generated_at: String,
    commit: String,
    smoke: bool,
    repetitions: usize,
    machine: Machine,
    figures: Vec<Figure>,
    comparisons: Vec<Comparison>,
}

pub struct Options {
    pub smoke: bool,
    pub repeat: usize,
    /// The Python that has the peers installed; none skips them.
    pub peers: Option<PathBuf>,
    pub out: PathBuf,
}

impl Options {
    pub fn parse(args: &[String]) -> anyhow::Result<Options> {
        let mut options = Options {
            smoke: false,
            repeat: 3,
            peers: None,
            out: PathBuf::from("bench/report"),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--smoke" => options.smoke = true,
                "--repeat" => options.repeat = value()?.parse().context("--repeat takes a number")?,
                "--peers" => options.peers = Some(PathBuf::from(value()?)),
                "--out" => options.out = PathBuf::from(value()?),
                other => anyhow::bail!(
                    "unknown option `{other}`; expected --smoke, --repeat N, --peers PYTHON or --out DIR"
                ),
            }
        }
        anyhow::ensure!(options.repeat >= 1, "--repeat must be at least 1");
        Ok(options)
    }
}

/// Runs `suites` (every benchmark, assembled by `main.rs`) and the peers
/// `repeat` times and writes the report.
pub async fn run<F, Fut>(options: Options, suites: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    SMOKE.store(options.smoke, Ordering::Relaxed);
    let started = std::time::Instant::now();
    for repetition in 1..=options.repeat {
        println!(
            "=== repetition {repetition} of {} ({:.0} s so far)",
            options.repeat,
            started.elapsed().as_secs_f64()
        );
        suites().await?;
        if let Some(python) = &options.peers {
            peers(python)?;
        }
    }
    let measured = std::mem::take(&mut *MEASURED.lock().unwrap_or_else(|e| e.into_inner()));
    let report = summarize(&measured, &options)?;
    write(&report, &options.out)?;
    println!(
        "=== report written to {} in {:.0} s",
        options.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `peers.py --json`: one measured figure a line on stdout.
fn peers(python: &Path) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers.py");
    let bin_dir = std::env::current_exe()?
        .parent()
        .context("no directory")?
        .to_path_buf();
    let mut command = std::process::Command::new(python);
    command
        .arg(&script)
        .arg("--json")
        .env("GPUPLANE_BENCH_BIN_DIR", &bin_dir);
    if smoke() {
        command.arg("--smoke");
    }
    let output = command.stderr(std::process::Stdio::inherit()).output()?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        output.status
    );
    for line in String::from_utf8(output.stdout)?.lines() {
        let measured: Measured =
            serde_json::from_str(line).with_context(|| format!("peers.py printed {line:?}"))?;
        MEASURED.lock().unwrap_or_else(|e| e.into_inner()).push(measured);
    }
    Ok(())
}

fn summarize(measured: &[Measured], options: &Options) -> anyhow::Result<ReportFile> {
    let mut by_id: BTreeMap<&str, Vec<&Measured>> = BTreeMap::new();
    for m in measured {
        by_id.entry(&m.id).or_default().push(m);
    }
    let figures: BTreeMap<&str, Figure> = by_id.iter().map(|(id, m)| (*id, Figure::of(m))).collect();
    let mut comparisons = Vec::new();
    for (section, rows) in SECTIONS {
        for row in *rows {
            let ours = figures
                .get(row.ours)
                .with_context(|| format!("no benchmark measured `{}`", row.ours))?;
            for peer in row.peers {
                match figures.get(peer) {
                    Some(figure) => comparisons.push(Comparison {
                        section: (*section).into(),
                        ours: row.ours.into(),
                        peer: (*peer).into(),
                        advantage: advantage(ours, figure),
                    }),
                    None if options.peers.is_some() => anyhow::bail!("peers.py did not measure `{peer}`"),
                    None => {}
                }
            }
        }
    }
    Ok(ReportFile {
        generated_at: now_utc(),
        commit: git_commit(),
        smoke: options.smoke,
        repetitions: options.repeat,
        machine: machine(),
        figures: figures.into_values().collect(),
        comparisons,
    })
}

fn write(report: &ReportFile, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("benchmarks.json"), serde_json::to_string_pretty(report)?)?;
    std::fs::write(out.join("BENCHMARKS.md"), markdown(report))?;
    std::fs::write(out.join("benchmarks.png"), chart(report)?)?;
    Ok(())
}

/// A figure with its spread: `1.23 M points/s (1.10–1.31)`.
fn shown(figure: &Figure) -> String {
    let value = |v: f64| number(v, &figure.unit);
    if figure.samples.len() > 1 {
        format!(
            "{} {} ({}–{})",
            value(figure.median),
            figure.unit,
            value(figure.min),
            value(figure.max)
        )
    } else {
        format!("{} {}", value(figure.median), figure.unit)
    }
}

/// Three significant figures, thousands grouped.
fn number(value: f64, unit: &str) -> String {
    if unit.ends_with("/s") && value >= 1e6 {
        return format!("{:.2}M", value / 1e6);
    }
    if value >= 1000.0 {
        return count(value.round() as usize);
    }
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else if value >= 1.0 {
        2
    } else {
        3
    };
    format!("{value:.decimals$}")
}

fn markdown(report: &ReportFile) -> String {
    let figures: BTreeMap<&str, &Figure> = report.figures.iter().map(|f| (f.id.as_str(), f)).collect();
    let m = &report.machine;
    let mut text = format!(
        "# GPUPlane benchmarks\n\n\
         Written by `./bench/report.sh` (`gpuplane-bench report`{}) on {} at commit `{}`: \
         {} cores ({}), {:.0} GiB of memory. Each figure is the median of {} repetition{}, \
         with the least and the most in brackets; the peers ran on the same machine in the same run. \
         \"× better\" is how many times faster, or smaller, ours is than the peer's.\n\n",
        if report.smoke {
            " --smoke: toy sizes, the figures mean nothing"
        } else {
            ""
        },
        report.generated_at,
        report.commit,
        m.cores,
        m.cpu,
        m.memory_gib,
        report.repetitions,
        if report.repetitions == 1 { "" } else { "s" },
    );
    text.push_str("![How many times better than each peer](benchmarks.png)\n\n");
    for (section, rows) in SECTIONS {
        text.push_str(&format!(
            "## {section}\n\n| figure | GPUPlane | goal | peer | × better |\n|---|---|---|---|---|\n"
        ));
        for row in *rows {
            let Some(ours) = figures.get(row.ours) else {
                continue;
            };
            let peers: Vec<&&Figure> = row.peers.iter().filter_map(|p| figures.get(p)).collect();
            if peers.is_empty() {
                text.push_str(&format!(
                    "| {} | {} | {} | | |\n",
                    ours.what,
                    shown(ours),
                    row.goal
                ));
            }
            for (i, peer) in peers.iter().enumerate() {
                let (what, value, goal) = if i == 0 {
                    (ours.what.as_str(), shown(ours), row.goal)
                } else {
                    ("", String::new(), "")
                };
                text.push_str(&format!(
                    "| {what} | {value} | {goal} | {}: {} | {:.1}× |\n",
                    peer.what,
                    shown(peer),
                    advantage(ours, peer)
                ));
            }
        }
        text.push('\n');
    }
    text.push_str(
        "Every figure's repetitions, and the comparisons, are in `benchmarks.json`. \
         How each figure is measured: the doc comment of its benchmark in `bench/src/` and `bench/peers.py`.\n",
    );
    text
}

/// A bar a comparison, on a log scale: how many times better than the peer.
fn chart(report: &ReportFile) -> anyhow::Result<Vec<u8>> {
    use plotters::prelude::*;
    let figures: BTreeMap<&str, &Figure> = report.figures.iter().map(|f| (f.id.as_str(), f)).collect();
    let bars: Vec<(String, f64)> = report
        .comparisons
        .iter()
        .map(|c| {
            let label = |id: &str| figures.get(id).map_or(id.to_string(), |f| f.what.clone());
            let text = format!(
                "{}: {}  vs  {}",
                c.section,
                short(&label(&c.ours)),
                short(&label(&c.peer))
            );
            (text, c.advantage)
        })
        .collect();
    let height = 120 + 34 * bars.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1400, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = bars.iter().map(|b| b.1).fold(10.0, f64::max) * 2.0;
        let bottom = bars.iter().map(|b| b.1).fold(1.0, f64::min).min(1.0) / 2.0;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "GPUPlane: times better than each peer (log scale; above 1 is better)",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(36)
            .build_cartesian_2d((bottom..top).log_scale(), 0.0..bars.len().max(1) as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("× better")
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (label, value)) in bars.iter().enumerate() {
            let y = bars.len() as f64 - i as f64;
            let color = if *value >= 1.0 {
                RGBColor(46, 125, 50)
            } else {
                RGBColor(198, 40, 40)
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(bottom, y - 0.85), (*value, y - 0.15)],
                color.mix(0.75).filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{value:.1}×  {label}"),
                (bottom * 1.05, y - 0.35),
                ("sans-serif", 14).into_font().color(&BLACK),
            )))?;
        }
        chart.draw_series(LineSeries::new(
            [(1.0, 0.0), (1.0, bars.len().max(1) as f64)],
            BLACK.stroke_width(1),
        ))?;
        root.present()?;
    }
    gpuplane_server::metrics::chart::png(&svg)
}

fn short(text: &str) -> String {
    let text = text.split(" (").next().unwrap_or(text);
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(59).collect::<String>())
    } else {
        text.to_string()
    }
}

fn now_utc() -> String {
    let output = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output();
    output
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "an unknown date".into(), |s| s.trim().to_string())
}

fn git_commit() -> String {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    output
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("unknown CPU", |l| l.trim_start_matches([' ', '\t', ':']))
        .to_string();
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib: kib / 1024.0 / 1024.0,
        cpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(id: &str, unit: &str, value: f64) -> Measured {
        Measured {
            id: id.into(),
            what: id.into(),
            unit: unit.into(),
            value,
        }
    }

    #[test]
    fn a_figure_is_the_median_of_its_repetitions_with_their_spread() {
        let values = [
            measured("a", "ms", 3.0),
            measured("a", "ms", 1.0),
            measured("a", "ms", 2.0),
        ];
        let figure = Figure::of(&values.iter().collect::<Vec<_>>());
        assert_eq!((figure.median, figure.min, figure.max), (2.0, 1.0, 3.0));
        let values = [measured("a", "ms", 4.0), measured("a", "ms", 1.0)];
        assert_eq!(Figure::of(&values.iter().collect::<Vec<_>>()).median, 2.5);
    }

    #[test]
    fn advantage_reads_the_unit_the_right_way_round() {
        let one = |unit: &str, value| Figure::of(&[&measured("x", unit, value)]);
        assert_eq!(advantage(&one("points/s", 300.0), &one("points/s", 100.0)), 3.0);
        assert_eq!(advantage(&one("ms", 10.0), &one("ms", 50.0)), 5.0);
        assert_eq!(advantage(&one("B", 4.0), &one("B", 2.0)), 0.5);
    }

    #[test]
    fn numbers_are_grouped_and_rounded() {
        assert_eq!(number(1_234_567.0, "points/s"), "1.23M");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(count(999), "999");
        assert_eq!(number(123_456.0, "lines/s"), "123,456");
        assert_eq!(number(12.345, "ms"), "12.3");
        assert_eq!(number(0.01234, "s"), "0.012");
    }
}
