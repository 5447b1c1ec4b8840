//! `cohort demo`: draws the Mandelbrot set from many small jobs.
//!
//! The picture is cut into tiles; each tile is one run of the `mandelbrot`
//! example job (embedded in this binary), with its own input, limits and
//! output. The tiles are stitched back into one PNG and a summary says how
//! many jobs ran and how fast.
//!
//! Today every tile runs on this process's runtime, on all cores: this shows
//! the job contract and the sandbox end to end. When cohort nodes form a
//! cluster, the same demo starts a local cluster and spreads the tiles over
//! its workers.

use crate::guests;
use crate::runtime::{JobLimits, JobRequest, Runtime, RuntimeConfig};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Largest picture side the demo draws, in pixels.
const SIDE_MAX: u32 = 16_384;
/// Most tile jobs the demo runs at once.
const PARALLEL_MAX: u32 = 256;
/// Tile sides the demo accepts; the upper bound is the mandelbrot example's
/// own limit on one tile.
const TILE_SIDE_MIN: u32 = 16;
const TILE_SIDE_MAX: u32 = 1024;
/// Tile jobs queued per running one: enough to keep every slot busy, few
/// enough that a huge picture does not hold all its tasks at once.
const QUEUED_PER_SLOT: usize = 2;

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
    /// Jobs run at once (default: one per core).
    #[arg(long)]
    pub parallel: Option<u32>,
}

/// Runs the demo, printing progress and a summary.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=SIDE_MAX).contains(&args.width) && (1..=SIDE_MAX).contains(&args.height),
        "width and height must be 1..={SIDE_MAX}"
    );
    anyhow::ensure!(
        (TILE_SIDE_MIN..=TILE_SIDE_MAX).contains(&args.tile),
        "tile must be {TILE_SIDE_MIN}..={TILE_SIDE_MAX} pixels"
    );
    let parallel = args
        .parallel
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get() as u32))
        .clamp(1, PARALLEL_MAX);
    let runtime = Runtime::new(RuntimeConfig {
        concurrent_jobs: parallel,
        ..RuntimeConfig::default()
    })?;
    let module = runtime.load(guests::MANDELBROT).await?;

    let tiles = tiles(&args);
    println!(
        "cohort demo: {}x{} Mandelbrot in {} tile jobs, {parallel} at a time (module sha256:{})",
        args.width,
        args.height,
        tiles.len(),
        &module.digest().to_string()[..12]
    );
    let bar = ProgressBar::new(tiles.len() as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} tiles ({per_sec})",
        )
        .expect("a valid template"),
    );
    let started = Instant::now();
    let mut pending = tiles.iter().copied();
    let mut running = JoinSet::new();
    let mut canvas = vec![0u8; (args.width * args.height * 3) as usize];
    let mut job_time = Duration::ZERO;
    loop {
        while running.len() < parallel as usize * QUEUED_PER_SLOT {
            let Some(tile) = pending.next() else { break };
            let request = JobRequest {
                input: tile_input(&args, tile)?,
                limits: JobLimits::default(),
                ..JobRequest::default()
            };
            let (runtime, module) = (runtime.clone(), module.clone());
            running.spawn(async move { (tile, runtime.run(&module, request).await) });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (tile, report) = joined?;
        job_time += report.duration;
        let png = report.outcome.map_err(|failure| {
            anyhow::anyhow!(
                "tile at ({}, {}) failed: [{}] {failure}",
                tile.x,
                tile.y,
                failure.code()
            )
        })?;
        paste(&mut canvas, args.width, tile, &png)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    write_png(&args.out, args.width, args.height, &canvas)?;

    let jobs = tiles.len() as f64;
    println!(
        "wrote {} ({}x{}): {} jobs in {:.2} s = {:.0} jobs/s; mean job {:.1} ms; {:.1}x parallel speed-up",
        args.out.display(),
        args.width,
        args.height,
        tiles.len(),
        elapsed.as_secs_f64(),
        jobs / elapsed.as_secs_f64(),
        job_time.as_secs_f64() * 1000.0 / jobs,
        job_time.as_secs_f64() / elapsed.as_secs_f64(),
    );
    Ok(())
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
            parallel: None,
        };
        let tiles = tiles(&args);
        assert_eq!(tiles.len(), 3 * 2);
        let area: u32 = tiles.iter().map(|t| t.w * t.h).sum();
        assert_eq!(area, 250 * 130);
        assert!(tiles.iter().all(|t| t.x + t.w <= 250 && t.y + t.h <= 130));
    }
}
