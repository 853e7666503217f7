// A deterministic corpus of varied strings for the encoding peer test.
//
// Kept out on purpose (see BUILD-NOTES §6): U+0085 and U+FEFF (JavaScript's \s disagrees with
// Unicode White_Space, which Rust tiktoken and Strata use), U+180E, U+017F "ſ" (case-folds to
// "s" under (?i), which js-tiktoken expands to plain 's|S'), unpaired surrogates, and scripts
// assigned after Unicode 14 (PCRE2 10.42's tables).
import { makeRng } from "./common.mjs";

const WORDS = [
  "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world", "tokenizer",
  "inference", "server", "Kimi", "attention", "latent", "MoE", "expert", "GPU", "CUDA",
  "I", "you", "they", "we", "it", "don", "can", "won", "isn", "O'Neil", "rock'n'roll",
  "naïve", "café", "résumé", "Straße", "façade", "coöperate", "ÅNGSTRÖM", "São", "Paulo",
  "HTTPServer", "getHTTPResponse", "snake_case", "camelCase", "SCREAMING", "x86_64", "v1.2.3",
];
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'D"];
const PUNCT = [".", ",", "!", "?", ";", ":", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}",
               "\"", "'", "`", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">",
               "|", "~", "«", "»", "¿", "¡", "…", "→", "∑", "√", "≈", "≠", "€", "£", "¥", "©"];
const SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "    ", "\u00A0",
                "\u3000", "\u2003", "\u2028", " \t \n", "\n   "];
const SNIPPETS = [
  "int main(int argc, char** argv) {\n  return 0;\n}\n",
  "def f(x):\n    return x ** 2  # square\n",
  "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
  "for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "<div class=\"x\">Hello &amp; welcome</div>",
  "https://example.com/path/to/file.html?query=1&b=2#frag",
  "$ cmake --build build -j2 && ctest --output-on-failure",
  "    indented line\n\tTabbed line\n",
  "C:\\Users\\name\\Documents\\file.txt",
];
const MULTILINGUAL = [
  "你好，世界！今天天气很好。", "我们正在测试分词器的正确性。", "日本語のテキストです。カタカナとひらがな。",
  "東京タワーは333メートルです。", "안녕하세요, 세계! 한국어 문장입니다.", "Привет, мир! Это тест.",
  "Γειά σου Κόσμε, αυτό είναι δοκιμή.", "مرحبا بالعالم، هذا اختبار.", "שלום עולם, זהו מבחן.",
  "नमस्ते दुनिया, यह एक परीक्षण है।", "สวัสดีชาวโลก นี่คือการทดสอบ", "Xin chào thế giới, đây là bài kiểm tra.",
  "Zażółć gęślą jaźń.", "Ærøskøbing på Ærø.", "ქართული ენა", "Հայերեն լեզու", "ᚠᚢᚦᚨᚱᚲ",
  "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵", "e\u0301 a\u0300\u0301\u0302 Z\u0336\u0335\u0334", "ﬁ ﬂ ＡＢＣ １２３ ｶﾀｶﾅ",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝟙𝟚𝟛", "½ ¾ Ⅻ ⅷ ① ② ⑳", "٣٤٥ ०१२ ๑๒๓",
];
// Code point ranges assigned long before Unicode 14 (safe for random sampling).
const RANGES = [
  [0x20, 0x7e], [0xa1, 0xff], [0x100, 0x17e], [0x391, 0x3c9], [0x410, 0x44f], [0x5d0, 0x5ea],
  [0x620, 0x64a], [0x905, 0x939], [0xe01, 0xe30], [0x3041, 0x3096], [0x30a1, 0x30fa],
  [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0x2000, 0x200a], [0x2010, 0x2027], [0x2190, 0x21ff],
  [0x2200, 0x22ff], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x300, 0x36f], [0x30, 0x39],
  [0xff01, 0xff5e], [0x3000, 0x303f],
];

function sentence(rng) {
  const parts = [];
  const n = rng.int(1, 14);
  for (let i = 0; i < n; ++i) {
    let w = rng.pick(WORDS);
    const r = rng.next();
    if (r < 0.15) w = w.toUpperCase();
    else if (r < 0.2) w += rng.pick(CONTRACTIONS);
    else if (r < 0.3) w = String(rng.int(0, 10 ** rng.int(1, 9)));
    else if (r < 0.38) w += rng.pick(PUNCT);
    else if (r < 0.42) w = rng.pick(PUNCT) + w;
    parts.push(w);
    parts.push(rng.next() < 0.8 ? " " : rng.pick(SPACES));
  }
  return parts.join("");
}

function randomCodePoints(rng) {
  const n = rng.int(1, 40);
  let s = "";
  for (let i = 0; i < n; ++i) {
    const [lo, hi] = rng.pick(RANGES);
    s += String.fromCodePoint(rng.int(lo, hi));
  }
  return s;
}

function mixed(rng) {
  const n = rng.int(2, 6);
  const parts = [];
  for (let i = 0; i < n; ++i) {
    const kind = rng.int(0, 4);
    if (kind === 0) parts.push(sentence(rng));
    else if (kind === 1) parts.push(rng.pick(SNIPPETS));
    else if (kind === 2) parts.push(rng.pick(MULTILINGUAL));
    else if (kind === 3) parts.push(randomCodePoints(rng));
    else parts.push(rng.pick(SPACES));
  }
  return parts.join(rng.next() < 0.5 ? "" : rng.pick(SPACES));
}

// Edge cases first, then `count` generated strings.
export function makeCorpus(seed, count) {
  const corpus = [
    "", " ", "a", "\n", "  ", "Hello world", "hello world", "HELLO WORLD", "I'm", "I'M", "you'll",
    "1", "12", "123", "1234", "12345678901234567890", "3.14159", "-42", "1,000,000",
    " ".repeat(200), "\n".repeat(50), " \n ".repeat(40), "a".repeat(3000), "ab".repeat(1500),
    "!".repeat(500), "1".repeat(999), "😀".repeat(100), "中".repeat(700), "e\u0301".repeat(300),
    "x" + "\u0301".repeat(2000), "   trailing   ", "\ttab\tseparated\t", "line1\r\nline2\r\n",
    ...SNIPPETS, ...MULTILINGUAL,
  ];
  const rng = makeRng(seed);
  for (let i = 0; i < count; ++i) {
    const kind = i % 4;
    corpus.push(kind === 0 ? sentence(rng) : kind === 1 ? randomCodePoints(rng) : mixed(rng));
  }
  return corpus;
}

// Strings containing special-token text, for parse-special comparisons.
export function makeSpecialCorpus(seed, count, specials) {
  const rng = makeRng(seed);
  const out = [];
  for (let i = 0; i < count; ++i) {
    const parts = [];
    const n = rng.int(1, 5);
    for (let j = 0; j < n; ++j) {
      parts.push(rng.next() < 0.5 ? sentence(rng) : rng.pick(MULTILINGUAL));
      if (rng.next() < 0.7) parts.push(rng.pick(specials));
    }
    out.push(parts.join(""));
  }
  return out;
}
