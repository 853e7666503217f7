// Cost of structured output per decode step: one logits mask over a real vocabulary (a
// tiktoken.model file: `json_constraint_bench PATH [iterations]`; the build makes o200k_base's
// under build/<preset>/engine/tokenizer/js_peer/), from matcher states along a JSON document:
// between tokens (full trie walk, pruned at the first byte), inside an unbounded string (the
// plain-token fast path), inside a bounded string and a number (full walks), and inside strings
// with a format or pattern and a number with bounds; and the same for GBNF grammars (a JSON
// grammar written in GBNF, an SQL-like grammar: the first mask from a state walks the trie, later
// ones come from the per-state cache). Prints the mask
// time per state next to the vocabulary size, and the time of one vocabulary-sized logits pass
// (the floor any mask costs).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "engine/structured/cfg_constraint.h"
#include "engine/structured/gbnf_examples.h"
#include "engine/structured/json_constraint.h"
#include "engine/tokenizer/base64.h"

namespace {

using strata::structured::BitMaskMatcher;
using strata::structured::CfgConstraint;
using strata::structured::JsonConstraint;

std::vector<std::string> LoadTiktoken(const char* path) {
  std::ifstream in(path);
  std::vector<std::string> bytes;
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    int64_t rank = 0;
    if (space == std::string::npos || !absl::SimpleAtoi(line.substr(space + 1), &rank)) continue;
    std::optional<std::string> b = strata::engine::Base64Decode(line.substr(0, space));
    if (!b || rank < 0) continue;
    if (static_cast<size_t>(rank) >= bytes.size()) bytes.resize(static_cast<size_t>(rank) + 1);
    bytes[static_cast<size_t>(rank)] = *b;
  }
  return bytes;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TIKTOKEN_MODEL [iterations]\n", argv[0]);
    return 2;
  }
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<std::string> bytes = LoadTiktoken(argv[1]);
  if (bytes.empty()) {
    std::fprintf(stderr, "no tokens read from %s\n", argv[1]);
    return 1;
  }
  const auto end_id = static_cast<int32_t>(bytes.size());
  bytes.emplace_back();  // the end id: no bytes
  const int64_t vocab = static_cast<int64_t>(bytes.size());
  auto t0 = std::chrono::steady_clock::now();
  auto tokens = std::make_shared<strata::structured::TokenVocab>(std::move(bytes));
  std::printf("vocabulary: %lld tokens, %zu trie nodes (%zu non-plain), built in %.1f ms\n",
              static_cast<long long>(vocab), tokens->all().nodes.size(),
              tokens->non_plain().nodes.size(), 1e3 * Seconds(t0));

  const char* schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":40},"bio":{"type":"string"},
      "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["red","green","blue"]}}},
      "required":["name","bio","age","tags"],"additionalProperties":false})";
  auto grammar = std::make_shared<strata::structured::JsonGrammar>(
      *strata::structured::CompileJsonSchema(strata::structured::Json::parse(schema)));
  const JsonConstraint constraint(grammar, tokens, {end_id});
  const std::string doc =
      R"({"name": "Ada Lovelace", "bio": "Wrote the first program", "age": 36, "tags": ["red"]})";
  // A wide object: 200 optional properties, so a key opens 200 matcher threads at once.
  strata::structured::Json wide = {{"type", "object"}, {"additionalProperties", false}};
  for (int i = 0; i < 200; ++i) {
    wide["properties"]["field_" + std::to_string(i)] = {{"type", "integer"}};
  }
  auto wide_grammar = std::make_shared<strata::structured::JsonGrammar>(
      *strata::structured::CompileJsonSchema(wide));
  const JsonConstraint wide_constraint(wide_grammar, tokens, {end_id});
  const std::string wide_doc = R"({"field_1)";
  // Patterns, formats and bounds: the string masks walk the whole trie (no plain-token path).
  const char* checked_schema = R"({"type":"object","properties":{
      "email":{"type":"string","format":"email"},"when":{"type":"string","format":"date-time"},
      "id":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},"note":{"type":"string","pattern":"err"},
      "score":{"type":"number","minimum":0,"maximum":1}},
      "required":["email","when","id","note","score"],"additionalProperties":false})";
  auto checked_grammar = std::make_shared<strata::structured::JsonGrammar>(
      *strata::structured::CompileJsonSchema(strata::structured::Json::parse(checked_schema)));
  const JsonConstraint checked(checked_grammar, tokens, {end_id});
  const std::string checked_doc =
      R"({"email": "ada@example.org", "when": "2026-11-30T14:00:00Z", "id": "ABC-1234", )"
      R"("note": "an error here", "score": 0.75})";
  // GBNF: JSON as llama.cpp's json.gbnf describes it, and a query language.
  auto gbnf = [&](const char* text) {
    return std::make_shared<CfgConstraint>(
        std::make_shared<strata::structured::CfgGrammar>(*strata::structured::CompileGbnf(text)),
        tokens, std::vector<int32_t>{end_id});
  };
  const auto json_gbnf = gbnf(strata::structured::kJsonObjectGbnf);
  const auto sql_gbnf = gbnf(R"(
root ::= "SELECT " columns " FROM " name (" WHERE " condition)? ";"
columns ::= "*" | name (", " name)*
condition ::= name " " ("=" | "<" | ">") " " (number | "'" [^']* "'") (" AND " condition)?
name ::= [a-z_] [a-z0-9_]*
number ::= [0-9]+)");
  const std::string sql_doc = "SELECT name, age FROM people WHERE age > 30 AND city = 'Par";
  struct Point {
    const char* what;
    const strata::engine::TokenConstraint* c;
    const std::string* doc;
    size_t prefix;
  };
  const Point points[] = {
      {"object start", &constraint, &doc, 1},
      {"key (declared)", &constraint, &doc, doc.find("\"name") + 1},
      {"bounded string", &constraint, &doc, doc.find("Ada") + 3},
      {"free string", &constraint, &doc, doc.find("Wrote") + 5},
      {"number", &constraint, &doc, doc.find("36") + 1},
      {"enum", &constraint, &doc, doc.find("\"red") + 1},
      {"200 keys: start", &wide_constraint, &wide_doc, 1},
      {"200 keys: key", &wide_constraint, &wide_doc, 2},
      {"200 keys: fiel", &wide_constraint, &wide_doc, 6},
      {"format email", &checked, &checked_doc, checked_doc.find("example")},
      {"format date-time", &checked, &checked_doc, checked_doc.find("11-30")},
      {"pattern (anchored)", &checked, &checked_doc, checked_doc.find("ABC") + 1},
      {"pattern (search)", &checked, &checked_doc, checked_doc.find("error")},
      {"bounded number", &checked, &checked_doc, checked_doc.find("0.7") + 2},
      {"gbnf json: start", json_gbnf.get(), &doc, 1},
      {"gbnf json: string", json_gbnf.get(), &doc, doc.find("Wrote") + 5},
      {"gbnf json: number", json_gbnf.get(), &doc, doc.find("36") + 1},
      {"gbnf sql: columns", sql_gbnf.get(), &sql_doc, sql_doc.find("name") + 2},
      {"gbnf sql: quoted", sql_gbnf.get(), &sql_doc, sql_doc.size()},
  };
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : logits) x = normal(rng);
  t0 = std::chrono::steady_clock::now();
  double sink = 0;
  for (int i = 0; i < iterations; ++i) {
    for (float x : logits) sink += x > 1e30f ? 1.0 : 0.0;
  }
  const double pass_ms = 1e3 * Seconds(t0) / iterations;
  std::printf("one pass over %lld logits: %.3f ms%s\n", static_cast<long long>(vocab), pass_ms,
              sink > 0 ? "" : " ");
  std::printf("%-20s %10s %10s %10s\n", "state", "first ms", "mask ms", "allowed");
  std::vector<uint64_t> bits;
  std::vector<int32_t> byte_token(256, -1);
  for (int32_t id = 0; id < tokens->size(); ++id) {
    if (tokens->bytes(id).size() == 1) byte_token[static_cast<uint8_t>(tokens->bytes(id)[0])] = id;
  }
  for (const Point& p : points) {
    // Feed the prefix byte by byte through single-byte tokens (every byte-level BPE has them).
    auto matcher = p.c->NewMatcher();
    auto* m = static_cast<BitMaskMatcher*>(matcher.get());
    for (size_t i = 0; i < p.prefix; ++i) {
      m->Accept(byte_token[static_cast<uint8_t>((*p.doc)[i])]);
    }
    // The first mask from a state may fill a cache (pattern strings, GBNF states); the rest
    // reuse it.
    t0 = std::chrono::steady_clock::now();
    m->AllowedTokens(vocab, &bits);
    const double first_ms = 1e3 * Seconds(t0);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) m->AllowedTokens(vocab, &bits);
    const double ms = 1e3 * Seconds(t0) / iterations;
    int64_t allowed = 0;
    for (uint64_t w : bits) allowed += __builtin_popcountll(w);
    std::printf("%-20s %10.3f %10.3f %10lld\n", p.what, first_ms, ms,
                static_cast<long long>(allowed));
  }
  return 0;
}
