// tool_call_constraint.h: the forced tool-call section, phase by phase.
#include "engine/structured/tool_call_constraint.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::structured {
namespace {

enum class Phase : uint8_t {
  kSectionBegin,  // only the section marker
  kCallBegin,     // only the call marker (the first call)
  kName,          // the call id, then the argument marker
  kArguments,     // the arguments JSON, then the call-end marker
  kAfterCall,     // another call marker (when more are allowed) or the section end
  kDone,          // the section is closed: only end ids
};

class ToolCallMatcher : public engine::TokenMatcher {
 public:
  explicit ToolCallMatcher(const ToolCallConstraint* c) : c_(c) {}

  void Prepare(int64_t vocab) override {
    if (part_) part_->Prepare(vocab);
  }

  void MaskLogits(float* logits, int64_t vocab) override {
    const ToolCallOptions& o = c_->options();
    const ToolCallTokens& m = o.markers;
    switch (phase_) {
      case Phase::kSectionBegin:
        return AllowOnly(logits, vocab, {m.section_begin}, {});
      case Phase::kCallBegin:
        return AllowOnly(logits, vocab, {m.call_begin}, {});
      case Phase::kName:
      case Phase::kArguments:
        return part_->MaskLogits(logits, vocab);
      case Phase::kAfterCall:
        if (calls_ < o.max_calls) {
          return AllowOnly(logits, vocab, {m.call_begin, m.section_end}, {});
        }
        return AllowOnly(logits, vocab, {m.section_end}, {});
      case Phase::kDone:
        return AllowOnly(logits, vocab, {}, o.end_ids);
    }
  }

  void Accept(int32_t token) override {
    const ToolCallOptions& o = c_->options();
    const ToolCallTokens& m = o.markers;
    switch (phase_) {
      case Phase::kSectionBegin:
        phase_ = token == m.section_begin ? Phase::kCallBegin : Phase::kDone;
        return;
      case Phase::kCallBegin:
      case Phase::kAfterCall:
        if (token == m.call_begin && calls_ < o.max_calls) {
          StartName();
        } else {
          phase_ = Phase::kDone;  // the section end, or a token no mask allowed
        }
        return;
      case Phase::kName:
        if (token == m.argument_begin) {
          StartArguments();
          return;
        }
        name_text_ += TokenText(token);
        part_->Accept(token);
        return;
      case Phase::kArguments:
        if (token == m.call_end) {
          ++calls_;
          phase_ = Phase::kAfterCall;
          part_.reset();
          part_constraint_.reset();
          return;
        }
        part_->Accept(token);
        return;
      case Phase::kDone:
        return;
    }
  }

 private:
  std::string TokenText(int32_t token) const {
    const TokenVocab& v = *c_->vocab();
    return token >= 0 && token < v.size() ? v.bytes(token) : std::string();
  }

  void StartPart(std::shared_ptr<const JsonGrammar> grammar, int32_t end_id) {
    part_constraint_ =
        std::make_unique<JsonConstraint>(std::move(grammar), c_->vocab(), std::vector{end_id});
    part_ = part_constraint_->NewMatcher();
  }

  void StartName() {
    phase_ = Phase::kName;
    name_text_.clear();
    StartPart(c_->NameGrammar(calls_), c_->options().markers.argument_begin);
  }

  // The name matcher only lets the argument marker through after a whole call id.
  void StartArguments() {
    const std::vector<ToolSpec>& tools = c_->options().tools;
    const ToolSpec* tool = nullptr;
    for (const ToolSpec& t : tools) {
      if (name_text_ == absl::StrCat("functions.", t.name, ":", calls_)) tool = &t;
    }
    if (tool == nullptr) {
      phase_ = Phase::kDone;
      return;
    }
    phase_ = Phase::kArguments;
    StartPart(tool->arguments, c_->options().markers.call_end);
  }

  // Masks every id but `ids` and `more` (markers and end ids), through the constraint's one
  // mask routine; bits_ keeps its words from step to step.
  void AllowOnly(float* logits, int64_t vocab, std::initializer_list<int32_t> ids,
                 const std::vector<int32_t>& more) {
    bits_.assign(static_cast<size_t>((vocab + 63) / 64), 0);
    auto allow = [&](int32_t id) {
      if (id >= 0 && id < vocab) bits_[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
    };
    for (int32_t id : ids) allow(id);
    for (int32_t id : more) allow(id);
    MaskLogitsOutside(bits_, logits, vocab);
  }

  const ToolCallConstraint* c_;  // held by the sampler's params, which outlive this matcher
  std::vector<uint64_t> bits_;
  Phase phase_ = Phase::kSectionBegin;
  int calls_ = 0;
  std::string name_text_;
  std::unique_ptr<JsonConstraint> part_constraint_;  // of the name or the arguments
  std::unique_ptr<engine::TokenMatcher> part_;
};

}  // namespace

ToolCallConstraint::ToolCallConstraint(ToolCallOptions options,
                                       std::shared_ptr<const TokenVocab> vocab)
    : options_(std::move(options)), vocab_(std::move(vocab)) {
  CHECK(!options_.tools.empty());
  CHECK_GE(options_.max_calls, 1);
  CHECK(vocab_ != nullptr);
}

std::unique_ptr<engine::TokenMatcher> ToolCallConstraint::NewMatcher() const {
  return std::make_unique<ToolCallMatcher>(this);
}

std::shared_ptr<const JsonGrammar> ToolCallConstraint::NameGrammar(int index) const {
  std::vector<std::string> ids;
  for (const ToolSpec& t : options_.tools)
    ids.push_back(absl::StrCat("functions.", t.name, ":", index));
  return std::make_shared<JsonGrammar>(ExactTextGrammar(std::move(ids)));
}

}  // namespace strata::structured
