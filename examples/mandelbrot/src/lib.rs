//! Renders one tile of the Mandelbrot set as a PNG.
//!
//! Input: JSON [`Tile`]: the whole image's size and view, and which pixel
//! rectangle of it to draw. Output: the tile as an 8-bit RGB PNG. Many tile
//! jobs together draw one picture; `cohort demo` does exactly that.

use cohort_guest::{JobError, Json, job};
use serde::Deserialize;

/// Largest tile side in pixels: bounds a job's memory and output size.
const TILE_SIDE_MAX: u32 = 1024;
/// Largest iteration budget per pixel.
const ITERATIONS_MAX: u32 = 100_000;

/// One rectangle of a Mandelbrot image.
#[derive(Deserialize)]
struct Tile {
    /// Whole image width and height in pixels.
    width: u32,
    height: u32,
    /// The tile: top-left pixel and size.
    x: u32,
    y: u32,
    w: u32,
    h: u32,
    /// Center of the view in the complex plane and its width.
    #[serde(default = "default_center_re")]
    center_re: f64,
    #[serde(default)]
    center_im: f64,
    #[serde(default = "default_span")]
    span: f64,
    #[serde(default = "default_iterations")]
    iterations: u32,
}

fn default_center_re() -> f64 {
    -0.65
}
fn default_span() -> f64 {
    3.2
}
fn default_iterations() -> u32 {
    500
}

#[job]
fn run(Json(tile): Json<Tile>) -> Result<Vec<u8>, JobError> {
    validate(&tile)?;
    let mut rgb = Vec::with_capacity((tile.w * tile.h * 3) as usize);
    let scale = tile.span / tile.width as f64;
    for py in tile.y..tile.y + tile.h {
        let ci = tile.center_im + (py as f64 - tile.height as f64 / 2.0) * scale;
        for px in tile.x..tile.x + tile.w {
            let cr = tile.center_re + (px as f64 - tile.width as f64 / 2.0) * scale;
            rgb.extend_from_slice(&color(
                escape_time(cr, ci, tile.iterations),
                tile.iterations,
            ));
        }
    }
    encode_png(tile.w, tile.h, &rgb)
}

fn validate(t: &Tile) -> Result<(), JobError> {
    if t.w == 0 || t.h == 0 || t.w > TILE_SIDE_MAX || t.h > TILE_SIDE_MAX {
        return Err(JobError::bad_input(format!(
            "tile sides must be 1..={TILE_SIDE_MAX} pixels"
        )));
    }
    if u64::from(t.x) + u64::from(t.w) > u64::from(t.width)
        || u64::from(t.y) + u64::from(t.h) > u64::from(t.height)
    {
        return Err(JobError::bad_input("tile lies outside the image"));
    }
    if t.iterations == 0 || t.iterations > ITERATIONS_MAX {
        return Err(JobError::bad_input(format!(
            "iterations must be 1..={ITERATIONS_MAX}"
        )));
    }
    if !(t.span.is_finite() && t.span > 0.0 && t.center_re.is_finite() && t.center_im.is_finite()) {
        return Err(JobError::bad_input(
            "center and span must be finite, span > 0",
        ));
    }
    Ok(())
}

/// Smoothed escape time in `[0, iterations]`; `iterations` means "inside".
fn escape_time(cr: f64, ci: f64, iterations: u32) -> f64 {
    let (mut zr, mut zi) = (0.0f64, 0.0f64);
    for i in 0..iterations {
        let (zr2, zi2) = (zr * zr, zi * zi);
        if zr2 + zi2 > 256.0 {
            // Continuous coloring: subtract the fractional escape overshoot.
            let nu =
                ((zr2 + zi2).ln() / 2.0 / std::f64::consts::LN_2).ln() / std::f64::consts::LN_2;
            return (i as f64 + 1.0 - nu).max(0.0);
        }
        zi = 2.0 * zr * zi + ci;
        zr = zr2 - zi2 + cr;
    }
    iterations as f64
}

fn color(t: f64, iterations: u32) -> [u8; 3] {
    if t >= iterations as f64 {
        return [0, 0, 0];
    }
    let s = (t / 48.0).fract();
    // A cosine palette: deep blue through white to orange.
    let channel =
        |phase: f64| (255.0 * (0.5 + 0.5 * (std::f64::consts::TAU * (s + phase)).cos())) as u8;
    [channel(0.0), channel(0.10), channel(0.20)]
}

fn encode_png(w: u32, h: u32, rgb: &[u8]) -> Result<Vec<u8>, JobError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let fail = |e: png::EncodingError| JobError::new("encode", e.to_string());
    let mut writer = encoder.write_header().map_err(fail)?;
    writer.write_image_data(rgb).map_err(fail)?;
    writer.finish().map_err(fail)?;
    Ok(out)
}
