//! `cohort demo`: a local cluster draws the Mandelbrot set from many jobs.
//!
//! The demo starts a cluster of `cohort node` processes (children of this
//! one) on loopback, each with its own temporary data directory, the first
//! as the seed of the others. It uploads the `mandelbrot` example (embedded
//! in this binary) through one node, submits one job per tile of the picture
//! through every node's API in turn, waits for the tiles with a progress
//! bar, stitches them into one PNG, and says how many jobs each node ran.
//!
//! With three nodes or more the demo also shows fault tolerance (unless
//! `--no-chaos`): a third of the way through, it kills the node hosting the
//! master with SIGKILL, reports which node took the master over and how
//! long that took, and the picture still completes from the survivors.
//! Every child is stopped (SIGTERM, then SIGKILL) and every temporary
//! directory removed on the way out, including on error and on Ctrl-C.
//!
//! Nothing outside loopback is used: no network, no external service.

use crate::api::types::{BatchItem, BatchRequest, ClusterResponse, SubmitRequest};
use crate::client::Node;
use crate::guests;
use crate::limits::{
    DEMO_CHILD_EXIT_POLL, DEMO_CLUSTER_POLL, DEMO_NODES_MAX, DEMO_SIDE_MAX, DEMO_START_TIMEOUT,
    DEMO_STOP_GRACE, DEMO_SUBMIT_BATCH, DEMO_TILE_SIDE_MAX, DEMO_TILE_SIDE_MIN, DEMO_WAIT_RETRY,
    DEMO_WAIT_TRIES_MAX, DEMO_WAITS_IN_FLIGHT,
};
use base64::Engine as _;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Arguments of `cohort demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where to write the picture.
    #[arg(long, short, default_value = "mandelbrot.png")]
    pub out: PathBuf,
    /// Picture width in pixels.
    #[arg(long, default_value_t = 1600)]
    pub width: u32,
    /// Picture height in pixels.
    #[arg(long, default_value_t = 1000)]
    pub height: u32,
    /// Tile side in pixels: one job per tile.
    #[arg(long, default_value_t = 100)]
    pub tile: u32,
    /// Iteration budget per pixel.
    #[arg(long, default_value_t = 2000)]
    pub iterations: u32,
    /// Nodes in the local cluster (each with every role).
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Do not kill the master's node during the render (it is killed by
    /// default when the cluster has 3 nodes or more).
    #[arg(long)]
    pub no_chaos: bool,
}

/// Fraction of the tiles done when the chaos kills the master's node.
const CHAOS_AT: f64 = 1.0 / 3.0;

/// A child `cohort node`, stopped when dropped.
struct ChildNode {
    name: String,
    child: Child,
    url: String,
    log: PathBuf,
}

impl ChildNode {
    fn start(exe: &Path, root: &Path, name: &str, seed: Option<&str>) -> anyhow::Result<Self> {
        let data = root.join(name);
        let log = root.join(format!("{name}.log"));
        let mut command = Command::new(exe);
        command
            .args([
                "node",
                "--listen",
                "127.0.0.1:0",
                "--node-id",
                name,
                "--data-dir",
            ])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?);
        if let Some(seed) = seed {
            command.args(["--seed", seed]);
        }
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let mut node = ChildNode {
            name: name.into(),
            child,
            url: String::new(),
            log,
        };
        match rx.recv_timeout(DEMO_START_TIMEOUT) {
            Ok(url) => {
                node.url = url;
                Ok(node)
            }
            Err(_) => anyhow::bail!("node {name} did not start:\n{}", node.log_tail()),
        }
    }

    /// The gossip address: the HTTP port, over UDP.
    fn gossip(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl ChildNode {
    /// Asks the node to stop (SIGTERM) without waiting.
    fn terminate(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
            let deadline = Instant::now() + DEMO_STOP_GRACE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(DEMO_CHILD_EXIT_POLL);
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs the demo, printing progress and a summary; stops on Ctrl-C.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=DEMO_SIDE_MAX).contains(&args.width) && (1..=DEMO_SIDE_MAX).contains(&args.height),
        "width and height must be 1..={DEMO_SIDE_MAX}"
    );
    anyhow::ensure!(
        (DEMO_TILE_SIDE_MIN..=DEMO_TILE_SIDE_MAX).contains(&args.tile),
        "tile must be {DEMO_TILE_SIDE_MIN}..={DEMO_TILE_SIDE_MAX} pixels"
    );
    anyhow::ensure!(
        (1..=DEMO_NODES_MAX).contains(&args.nodes),
        "nodes must be 1..={DEMO_NODES_MAX}"
    );
    let root = tempfile::Builder::new().prefix("cohort-demo-").tempdir()?;
    let exe = std::env::current_exe()?;
    // Dropped (children stopped) before `root` is removed: declared after it.
    let mut nodes: Vec<ChildNode> = Vec::new();
    let (result, interrupted) = tokio::select! {
        result = demo(&args, &exe, root.path(), &mut nodes) => (result, false),
        _ = tokio::signal::ctrl_c() => (Err(anyhow::anyhow!("interrupted; the demo cluster is stopped")), true),
    };
    if result.is_err() && !interrupted {
        for node in &nodes {
            eprintln!("--- log of {} ---\n{}", node.name, node.log_tail());
        }
    }
    // Stop them all at once, then wait for each.
    for node in &mut nodes {
        node.terminate();
    }
    drop(nodes);
    result
}

async fn demo(
    args: &DemoArgs,
    exe: &Path,
    root: &Path,
    nodes: &mut Vec<ChildNode>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    start_nodes(args.nodes, exe, root, nodes).await?;
    let clients: Vec<Node> = nodes.iter().map(|n| Node::new(&n.url)).collect();
    let cluster = wait_for_cluster(&clients[0], args.nodes as usize).await?;
    println!(
        "cohort demo: a {}-node cluster on loopback is up in {:.1} s; the master runs on {}",
        args.nodes,
        started.elapsed().as_secs_f64(),
        cluster.master_node
    );

    // Upload through the last node: it stores the module on every back-end.
    let module = clients[clients.len() - 1]
        .upload(guests::MANDELBROT.to_vec())
        .await?;
    let tiles = tiles(args);
    println!(
        "rendering {}x{} in {} tile jobs of `mandelbrot` (sha256:{}), submitted through every node",
        args.width,
        args.height,
        tiles.len(),
        &module[..12]
    );
    let bar = ProgressBar::new(tiles.len() as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} tiles ({per_sec})",
        )
        .expect("a valid template"),
    );
    let render_started = Instant::now();
    let ids = submit_tiles(args, &clients, &module, &tiles).await?;
    let chaos_at =
        (args.nodes >= 3 && !args.no_chaos).then_some((tiles.len() as f64 * CHAOS_AT) as u64);
    let (canvas, per_node) = collect_tiles(args, nodes, clients, ids, chaos_at, &bar).await?;
    bar.finish_and_clear();
    let elapsed = render_started.elapsed();
    write_png(&args.out, args.width, args.height, &canvas)?;
    print_summary(args, tiles.len(), elapsed, &per_node);
    Ok(())
}

/// Starts `count` nodes one after another, every one after the first
/// seeded with the first one's gossip address.
async fn start_nodes(
    count: u32,
    exe: &Path,
    root: &Path,
    nodes: &mut Vec<ChildNode>,
) -> anyhow::Result<()> {
    for n in 1..=count {
        let seed = nodes.first().map(|first| first.gossip().to_string());
        let name = format!("demo-{n}");
        let exe = exe.to_path_buf();
        let root = root.to_path_buf();
        let node = tokio::task::spawn_blocking(move || {
            ChildNode::start(&exe, &root, &name, seed.as_deref())
        })
        .await??;
        nodes.push(node);
    }
    Ok(())
}

/// Submits one job per tile, each batch through the next node; returns
/// every tile with its job's id.
async fn submit_tiles(
    args: &DemoArgs,
    clients: &[Node],
    module: &str,
    tiles: &[Tile],
) -> anyhow::Result<Vec<(Tile, u64)>> {
    let mut ids = Vec::with_capacity(tiles.len());
    for (n, chunk) in tiles.chunks(DEMO_SUBMIT_BATCH).enumerate() {
        let client = &clients[n % clients.len()];
        let batch = BatchRequest {
            jobs: chunk
                .iter()
                .map(|&tile| {
                    Ok(SubmitRequest {
                        module: module.to_string(),
                        input_base64: Some(
                            base64::engine::general_purpose::STANDARD
                                .encode(tile_input(args, tile)?),
                        ),
                        ..SubmitRequest::default()
                    })
                })
                .collect::<serde_json::Result<_>>()?,
        };
        for (tile, item) in chunk.iter().zip(client.submit_batch(&batch).await?.results) {
            match item {
                BatchItem::Accepted(accepted) => ids.push((*tile, accepted.id)),
                BatchItem::Refused(error) => {
                    anyhow::bail!("a tile was refused: {}: {}", error.code, error.message)
                }
            }
        }
    }
    Ok(ids)
}

/// Waits for every tile job ([`DEMO_WAITS_IN_FLIGHT`] at once) and pastes its
/// picture into the canvas, killing the master's node once `chaos_at`
/// tiles are done; returns the canvas and how many tiles each node ran.
async fn collect_tiles(
    args: &DemoArgs,
    nodes: &mut [ChildNode],
    clients: Vec<Node>,
    ids: Vec<(Tile, u64)>,
    mut chaos_at: Option<u64>,
    bar: &ProgressBar,
) -> anyhow::Result<(Vec<u8>, BTreeMap<String, u64>)> {
    let mut canvas = vec![0u8; (args.width * args.height * 3) as usize];
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    let mut pending = ids.into_iter().enumerate();
    let mut waiting = JoinSet::new();
    let clients = std::sync::Arc::new(clients);
    let mut takeover = None;
    loop {
        while waiting.len() < DEMO_WAITS_IN_FLIGHT {
            let Some((n, (tile, id))) = pending.next() else {
                break;
            };
            let clients = clients.clone();
            waiting.spawn(async move { (tile, tile_result(&clients, n, id).await) });
        }
        let Some(joined) = waiting.join_next().await else {
            break;
        };
        let (tile, outcome) = joined?;
        let (worker, png) = outcome?;
        paste(&mut canvas, args.width, tile, &png)?;
        *per_node.entry(worker).or_default() += 1;
        bar.inc(1);
        if chaos_at.is_some_and(|at| bar.position() >= at) {
            chaos_at = None;
            takeover = Some(kill_the_master(nodes, &clients, bar).await?);
        }
    }
    if let Some(takeover) = takeover {
        takeover.await??;
    }
    Ok((canvas, per_node))
}

/// The closing line: the picture, the rate, and the jobs each node ran.
fn print_summary(
    args: &DemoArgs,
    jobs: usize,
    elapsed: Duration,
    per_node: &BTreeMap<String, u64>,
) {
    let spread: Vec<String> = per_node
        .iter()
        .map(|(node, count)| format!("{node}: {count}"))
        .collect();
    println!(
        "wrote {} ({}x{}): {jobs} jobs in {:.2} s = {:.0} jobs/s, run by {} ({})",
        args.out.display(),
        args.width,
        args.height,
        elapsed.as_secs_f64(),
        jobs as f64 / elapsed.as_secs_f64(),
        if per_node.len() == 1 {
            "1 node".to_string()
        } else {
            format!("{} nodes", per_node.len())
        },
        spread.join(", ")
    );
}

async fn wait_for_cluster(client: &Node, nodes: usize) -> anyhow::Result<ClusterResponse> {
    let deadline = Instant::now() + DEMO_START_TIMEOUT;
    loop {
        if let Ok(cluster) = client.cluster().await
            && cluster.nodes.iter().filter(|n| n.status == "live").count() == nodes
            && !cluster.master_node.is_empty()
            && cluster.workers.len() == nodes
        {
            return Ok(cluster);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the demo cluster did not form within {DEMO_START_TIMEOUT:?}"
        );
        tokio::time::sleep(DEMO_CLUSTER_POLL).await;
    }
}

/// Kills the node hosting the master (SIGKILL) and returns a task that
/// reports, above the progress bar, which node took the master over and
/// how long it took.
async fn kill_the_master(
    nodes: &mut [ChildNode],
    clients: &[Node],
    bar: &ProgressBar,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let cluster = clients[0].cluster().await?;
    let (old, epoch) = (cluster.master_node.clone(), cluster.master_epoch);
    let Some(victim) = nodes.iter_mut().position(|n| n.name == old) else {
        anyhow::bail!("no demo node hosts the master (it is on {old:?})");
    };
    let killed = Instant::now();
    nodes[victim].child.kill()?;
    say(
        bar,
        format!(
            "chaos: killed {old} with SIGKILL: it hosted the master (epoch {epoch}) and ran jobs"
        ),
    );
    let survivor = clients[(victim + 1) % clients.len()].clone();
    let bar = bar.clone();
    Ok(tokio::spawn(async move {
        let deadline = killed + DEMO_START_TIMEOUT;
        loop {
            if let Ok(cluster) = survivor.cluster().await
                && cluster.master_epoch > epoch
                && cluster.master_node != old
            {
                say(
                    &bar,
                    format!(
                        "chaos: {} took the master over (epoch {}) {:.2} s after the kill; the render goes on",
                        cluster.master_node,
                        cluster.master_epoch,
                        killed.elapsed().as_secs_f64()
                    ),
                );
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no node took the master over within {DEMO_START_TIMEOUT:?}"
            );
            tokio::time::sleep(DEMO_CLUSTER_POLL).await;
        }
    }))
}

/// Prints a line above the progress bar (or plainly, without a terminal).
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        println!("{line}");
    } else {
        bar.println(line);
    }
}

/// Waits for tile job `id` through node `n` (or the next ones, if a node
/// does not answer); returns the node that ran it and its PNG.
async fn tile_result(clients: &[Node], n: usize, id: u64) -> anyhow::Result<(String, Vec<u8>)> {
    let mut failures = 0;
    let mut at = n;
    loop {
        let client = &clients[at % clients.len()];
        let polled = async {
            let job = client.job(id, 30_000).await?;
            let png = match job.state.as_str() {
                "succeeded" => Some(client.result(id).await?.to_vec()),
                _ => None,
            };
            anyhow::Ok((job, png))
        };
        let (job, png) = match polled.await {
            Ok(polled) => polled,
            Err(error) => {
                failures += 1;
                anyhow::ensure!(
                    failures < DEMO_WAIT_TRIES_MAX,
                    "tile job {id}: no node answered: {error}"
                );
                at += 1;
                tokio::time::sleep(DEMO_WAIT_RETRY).await;
                continue;
            }
        };
        match job.state.as_str() {
            "queued" | "running" => continue,
            "succeeded" => {
                let worker = job
                    .attempts
                    .last()
                    .map(|a| a.worker.clone())
                    .unwrap_or_default();
                return Ok((worker, png.unwrap_or_default()));
            }
            state => anyhow::bail!(
                "tile job {id} {state}: {}",
                job.error
                    .map(|e| format!("{}: {}", e.code, e.message))
                    .unwrap_or_default()
            ),
        }
    }
}

/// The mandelbrot example's input for one tile of the picture.
fn tile_input(args: &DemoArgs, tile: Tile) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&serde_json::json!({
        "width": args.width, "height": args.height,
        "x": tile.x, "y": tile.y, "w": tile.w, "h": tile.h,
        "iterations": args.iterations,
    }))
}

#[derive(Debug, Clone, Copy)]
struct Tile {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

fn tiles(args: &DemoArgs) -> Vec<Tile> {
    let mut tiles = Vec::new();
    for y in (0..args.height).step_by(args.tile as usize) {
        for x in (0..args.width).step_by(args.tile as usize) {
            tiles.push(Tile {
                x,
                y,
                w: args.tile.min(args.width - x),
                h: args.tile.min(args.height - y),
            });
        }
    }
    tiles
}

/// Decodes a tile's PNG and copies its rows into the canvas.
fn paste(canvas: &mut [u8], width: u32, tile: Tile, png_bytes: &[u8]) -> anyhow::Result<()> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes)).read_info()?;
    let mut pixels = vec![0; reader.output_buffer_size().unwrap_or(0)];
    let info = reader.next_frame(&mut pixels)?;
    anyhow::ensure!(
        (info.width, info.height, info.color_type) == (tile.w, tile.h, png::ColorType::Rgb),
        "tile at ({}, {}) came back {}x{} {:?}, expected {}x{} RGB",
        tile.x,
        tile.y,
        info.width,
        info.height,
        info.color_type,
        tile.w,
        tile.h
    );
    let row_bytes = (tile.w * 3) as usize;
    for row in 0..tile.h as usize {
        let src = &pixels[row * info.line_size..row * info.line_size + row_bytes];
        let at = ((tile.y as usize + row) * width as usize + tile.x as usize) * 3;
        canvas[at..at + row_bytes].copy_from_slice(src);
    }
    Ok(())
}

fn write_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> anyhow::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_the_picture_exactly_once() {
        let args = DemoArgs {
            out: "x.png".into(),
            width: 250,
            height: 130,
            tile: 100,
            iterations: 10,
            nodes: 3,
            no_chaos: false,
        };
        let tiles = tiles(&args);
        assert_eq!(tiles.len(), 3 * 2);
        let area: u32 = tiles.iter().map(|t| t.w * t.h).sum();
        assert_eq!(area, 250 * 130);
        assert!(tiles.iter().all(|t| t.x + t.w <= 250 && t.y + t.h <= 130));
    }
}
