// Peer comparison against @huggingface/jinja (tests/js): every rendering written by
// tests/js/tokenizer/setup_template_peer.mjs (templates x conversations x kwargs x
// add_generation_prompt) must come out of ChatTemplate byte for byte, and where the JavaScript
// renderer fails, Strata must fail too, with the same message for raise_exception().
//
// Data directory: $STRATA_TOKENIZER_PEER_DIR (set by ctest; the fixture creates it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "engine/tokenizer/chat_template.h"

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;

std::string PeerDir() {
  const char* dir = std::getenv("STRATA_TOKENIZER_PEER_DIR");
  return dir == nullptr ? std::string() : std::string(dir);
}

std::optional<std::string> OptionalString(const Json& v, const char* key) {
  if (!v.contains(key) || !v[key].is_string()) return std::nullopt;
  return v[key].get<std::string>();
}

TEST(ChatTemplatePeerTest, RenderingsEqualHuggingFaceJinja) {
  ASSERT_FALSE(PeerDir().empty())
      << "STRATA_TOKENIZER_PEER_DIR is not set; run through ctest, which needs "
         "`npm ci --prefix tests/js`";
  std::ifstream in(PeerDir() + "/template_vectors.json");
  std::stringstream text;
  text << in.rdbuf();
  const Json vectors = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(vectors.is_array()) << "cannot read template_vectors.json";
  ASSERT_GE(vectors.size(), 250u);

  std::set<std::string> templates;
  int rendered = 0, raised = 0, failures = 0;
  for (const Json& v : vectors) {
    const std::string label = v["template"].get<std::string>() + "/" +
                              v["case"].get<std::string>() + " kwargs=" + v["kwargs"].dump() +
                              " agp=" + v["add_generation_prompt"].dump();
    templates.insert(v["template"].get<std::string>());
    ChatTemplateTokens tokens{OptionalString(v, "bos_token"), OptionalString(v, "eos_token"),
                              std::nullopt, std::nullopt};
    auto tmpl = ChatTemplate::Create(v["source"].get<std::string>(), tokens);
    ASSERT_TRUE(tmpl.ok()) << label << ": " << tmpl.status();
    ChatTemplateInputs inputs;
    inputs.messages = v["messages"];
    inputs.tools = v["tools"];
    inputs.add_generation_prompt = v["add_generation_prompt"].get<bool>();
    inputs.kwargs = v["kwargs"];
    absl::StatusOr<std::string> out = tmpl->Render(inputs);
    if (v["error"].get<bool>()) {
      EXPECT_FALSE(out.ok()) << label << ": JavaScript failed (" << v["message"] << ") but Strata "
                             << "rendered:\n"
                             << *out;
      if (!out.ok() && !absl::StartsWith(out.status().message(), "chat template:")) {
        // A raise_exception() message, passed through verbatim.
        EXPECT_EQ(std::string(out.status().message()), v["message"].get<std::string>()) << label;
        ++raised;
      }
      continue;
    }
    if (!out.ok()) {
      ADD_FAILURE() << label << ": " << out.status();
    } else if (*out != v["expected"].get<std::string>()) {
      ADD_FAILURE() << label << "\n--- strata ---\n"
                    << *out << "\n--- @huggingface/jinja ---\n"
                    << v["expected"].get<std::string>();
    } else {
      ++rendered;
      continue;
    }
    if (++failures > 8) break;
  }
  EXPECT_EQ(templates.size(), 7u);
  EXPECT_GE(rendered, 240);
  EXPECT_GE(raised, 30);  // Kimi K3-style effort check, Llama-style single-call check, features
}

}  // namespace
}  // namespace strata::engine
