//! A deterministic UTF-8 text for comparing `wordcount` across languages:
//! words in Latin, Greek (with final sigma), Cyrillic, CJK, Devanagari
//! (combining marks), Turkish dotted İ, titlecase digraphs, astral letters,
//! ligatures, superscript and Roman numerals, apostrophes and emoji.

/// About a megabyte: the size the language comparison uses.
pub const SAMPLE_BYTES: usize = 1_000_000;

/// Words chosen to differ between naive and Unicode-correct word splitting
/// and lowercasing.
const WORDS: &[&str] = &[
    "the",
    "and",
    "cat",
    "Hat",
    "don't",
    "'quoted'",
    "naïve",
    "café",
    "Über",
    "straße",
    "ΟΔΟΣ",
    "Ελλάδα",
    "σοφία",
    "Москва",
    "ёлка",
    "日本語",
    "中文",
    "東京",
    "नमस्ते",
    "हिन्दी",
    "İstanbul",
    "ǅemal",
    "𝒜lpha",
    "𐐀𐐨",
    "x²",
    "Ⅻ",
    "١٢٣",
    "2026",
    "ﬁne",
    "Ⓐbc",
    "e\u{301}te",
];
/// Separators, including ones that are word characters nowhere.
const SEPARATORS: &[&str] = &[
    " ", " ", " ", "\n", ", ", ". ", " — ", "!? ", " 🙂 ", "\t", "; ", "–", "_", "-",
];
/// Letters of the made-up words between the real ones.
const LETTERS: &[char] = &[
    'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q', 'r', 's',
    't', 'u', 'v', 'w', 'x', 'y', 'z', 'é', 'ø', 'ß',
];

/// At least `bytes` bytes of text, the same on every call.
pub fn sample(bytes: usize) -> String {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |bound: usize| {
        // xorshift64*: enough for a fixed, well-mixed sequence.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound
    };
    let mut text = String::with_capacity(bytes + 64);
    while text.len() < bytes {
        let word = if next(10) < 6 {
            WORDS[next(WORDS.len())].to_string()
        } else {
            (0..1 + next(8))
                .map(|_| LETTERS[next(LETTERS.len())])
                .collect()
        };
        if next(10) == 0 {
            text.push_str(&word.to_uppercase());
        } else {
            text.push_str(&word);
        }
        text.push_str(SEPARATORS[next(SEPARATORS.len())]);
    }
    text
}
