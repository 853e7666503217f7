// xtml_constraint.h: the reply's markup as a queue of steps, the values through JSON matchers.
#include "engine/structured/xtml_constraint.h"

#include <deque>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/check.h"
#include "core/status.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/token_mask.h"

namespace strata::structured {
namespace {

// The type attribute of a JSON literal's text (compact JSON, json_schema.h).
const char* LiteralType(const std::string& literal) {
  switch (literal.empty() ? '\0' : literal[0]) {
    case '"':
      return "string";
    case 't':
    case 'f':
      return "boolean";
    case 'n':
      return "null";
    case '{':
      return "object";
    case '[':
      return "array";
    default:
      return "number";
  }
}

class FormCollector {
 public:
  explicit FormCollector(const JsonGrammar& g) : g_(g) {}

  // Adds the forms of node `n` (a property's schema, or an anyOf alternative of it); `whole` is
  // the property's schema, the JSON body of every non-string form.
  absl::Status Add(int32_t n, int32_t whole) {
    const SchemaNode& node = g_.nodes[static_cast<size_t>(n)];
    switch (node.kind) {
      case NodeKind::kString:
        if (node.pattern >= 0) {
          return AddString(RegexTextGrammar(g_.patterns[static_cast<size_t>(node.pattern)]));
        }
        return AddString(LengthBoundedText(node.min_length, node.max_length));
      case NodeKind::kNumber:
      case NodeKind::kInteger:
        return AddJson("number", whole);
      case NodeKind::kObject:
        return AddJson("object", whole);
      case NodeKind::kArray:
        return AddJson("array", whole);
      case NodeKind::kLiterals: {
        std::vector<std::string> strings;
        for (const std::string& literal : node.literals) {
          if (literal[0] == '"') {
            strings.push_back(Json::parse(literal).get<std::string>());
          } else {
            RETURN_IF_ERROR(AddJson(LiteralType(literal), whole));
          }
        }
        if (!strings.empty()) return AddString(ExactTextGrammar(std::move(strings)));
        return absl::OkStatus();
      }
      case NodeKind::kAnyOf:
        for (int32_t alternative : node.alternatives) RETURN_IF_ERROR(Add(alternative, whole));
        return absl::OkStatus();
      case NodeKind::kAny:
        RETURN_IF_ERROR(AddString(AnyText()));
        for (const char* type : {"number", "boolean", "null", "object", "array"}) {
          RETURN_IF_ERROR(AddJson(type, whole));
        }
        return absl::OkStatus();
      case NodeKind::kText:
        break;
    }
    return absl::InvalidArgumentError("a raw-text node inside a JSON schema");
  }

  std::vector<XtmlArgumentForm> Take() { return std::move(forms_); }

 private:
  static JsonGrammar AnyText() {
    absl::StatusOr<ByteDfa> dfa = CompileRegex(R"([\s\S]*)", RegexAnchoring::kFullMatch);
    CHECK(dfa.ok()) << dfa.status();
    return RegexTextGrammar(*std::move(dfa));
  }

  // Any text of min_length to max_length code points (−1: unbounded), as the schema's
  // minLength / maxLength count them; any text when the bounds compile to too large an automaton.
  static JsonGrammar LengthBoundedText(int64_t min_length, int64_t max_length) {
    if (min_length <= 0 && max_length < 0) return AnyText();
    const std::string bound = max_length < 0 ? absl::StrCat("{", min_length, ",}")
                                             : absl::StrCat("{", min_length, ",", max_length, "}");
    absl::StatusOr<ByteDfa> dfa =
        CompileRegex(absl::StrCat(R"([\s\S])", bound), RegexAnchoring::kFullMatch);
    if (!dfa.ok()) return AnyText();
    return RegexTextGrammar(*std::move(dfa));
  }

  bool Has(const std::string& type) const {
    for (const XtmlArgumentForm& f : forms_) {
      if (f.type == type) return true;
    }
    return false;
  }

  // The first string form wins (a narrower one may follow; the first still fits the schema).
  absl::Status AddString(JsonGrammar body) {
    if (!Has("string")) {
      forms_.push_back({"string", std::make_shared<JsonGrammar>(std::move(body))});
    }
    return absl::OkStatus();
  }

  absl::Status AddJson(const std::string& type, int32_t whole) {
    if (Has(type)) return absl::OkStatus();
    JsonGrammar body = g_;
    body.root = whole;
    body.root_whitespace = false;
    body.max_exponent_digits = 2;  // read back as doubles: never infinite
    forms_.push_back({type, std::make_shared<JsonGrammar>(std::move(body))});
    return absl::OkStatus();
  }

  const JsonGrammar& g_;
  std::vector<XtmlArgumentForm> forms_;
};

enum class StepKind : uint8_t {
  kReasoning,        // free, until `C think S`
  kMarker,           // only `id`
  kPart,             // `part`'s matcher, which ends with its end id (the next marker)
  kArgumentOrClose,  // after a call's tag or an argument: `O` (an argument) or `C` (call end)
  kCallOrClose,      // after a call: `O` (another call) or `C` (tools end)
  kDone,             // only the end ids
};

// What a kPart's text decides once its end id arrives.
enum class PartRole : uint8_t { kPlain, kCallTag, kArgumentTag };

struct Step {
  StepKind kind = StepKind::kDone;
  int32_t id = -1;  // kMarker: the marker; kPart: the end id that closes the part
  std::shared_ptr<const engine::TokenConstraint> part;
  PartRole role = PartRole::kPlain;
};

Step Marker(int32_t id) { return {StepKind::kMarker, id, nullptr, PartRole::kPlain}; }
Step Part(std::shared_ptr<const engine::TokenConstraint> part, int32_t end_id,
          PartRole role = PartRole::kPlain) {
  return {StepKind::kPart, end_id, std::move(part), role};
}

class XtmlMatcher : public engine::TokenMatcher {
 public:
  explicit XtmlMatcher(const XtmlReplyConstraint* c) : c_(c) {
    const XtmlReplyOptions& o = c_->options();
    const XtmlMarkers& m = o.markers;
    if (o.thinking) {
      Push({StepKind::kReasoning});
      Push(Marker(m.open));
      Push(Tag("response"));
    }
    if (o.response) {
      Push(Part(o.response, m.close));
    } else {
      Push(Marker(m.close));  // an empty response channel
    }
    Push(Tag("response"));
    if (!o.tools.empty()) {
      Push(Marker(m.open));
      Push(Tag("tools"));
      Push(Marker(m.open));
      Push(Part(CallTags(), m.sep, PartRole::kCallTag));
      // The first call's steps go before these (StartCall); its end adds kCallOrClose, whose
      // `C` closes the tools channel.
      Push(Tag("tools"));
    }
    Push(Marker(m.close));
    Push(Tag("message"));
    Push(Marker(m.end_of_message));
    Push({StepKind::kDone});
    Enter();
  }

  void Prepare(int64_t vocab) override {
    if (part_) part_->Prepare(vocab);
  }

  void MaskLogits(float* logits, int64_t vocab) override {
    const XtmlReplyOptions& o = c_->options();
    const XtmlMarkers& m = o.markers;
    const Step& s = steps_.front();
    switch (s.kind) {
      case StepKind::kReasoning: {
        // Free, but the reply may not end before its constrained part.
        constexpr float kNegInf = -std::numeric_limits<float>::infinity();
        for (int32_t id : o.end_ids) {
          if (id >= 0 && id < vocab) logits[id] = kNegInf;
        }
        if (m.end_of_message >= 0 && m.end_of_message < vocab) logits[m.end_of_message] = kNegInf;
        return;
      }
      case StepKind::kMarker:
        return AllowOnly(logits, vocab, {s.id});
      case StepKind::kPart:
        return part_->MaskLogits(logits, vocab);
      case StepKind::kArgumentOrClose: {
        const bool more = next_argument_ < Arguments().size();
        const bool can_close = !RequiredLeft();
        if (more && can_close) return AllowOnly(logits, vocab, {m.open, m.close});
        return AllowOnly(logits, vocab, {more ? m.open : m.close});
      }
      case StepKind::kCallOrClose:
        if (calls_ < o.max_calls) return AllowOnly(logits, vocab, {m.open, m.close});
        return AllowOnly(logits, vocab, {m.close});
      case StepKind::kDone:
        if (o.end_ids.empty()) return;  // ignore_eos: free after the message
        return AllowOnly(logits, vocab, o.end_ids);
    }
  }

  void Accept(int32_t token) override {
    const XtmlMarkers& m = c_->options().markers;
    Step& s = steps_.front();
    switch (s.kind) {
      case StepKind::kReasoning:
        return AcceptReasoning(token);
      case StepKind::kMarker:
        if (token != s.id) return Abandon();
        return Next();
      case StepKind::kPart:
        return AcceptPart(token);
      case StepKind::kArgumentOrClose:
        if (token == m.open && next_argument_ < Arguments().size()) {
          steps_.pop_front();
          PushFront(Part(ArgumentTags(), m.sep, PartRole::kArgumentTag));
          return Enter();
        }
        if (token == m.close && !RequiredLeft()) {
          steps_.pop_front();
          PushFront({StepKind::kCallOrClose});
          PushFront(Tag("call"));
          return Enter();
        }
        return Abandon();
      case StepKind::kCallOrClose:
        if (token == m.open && calls_ < c_->options().max_calls) {
          steps_.pop_front();
          PushFront(Part(CallTags(), m.sep, PartRole::kCallTag));
          return Enter();
        }
        if (token == m.close) return Next();
        return Abandon();
      case StepKind::kDone:
        return;
    }
  }

 private:
  void Push(Step s) { steps_.push_back(std::move(s)); }
  void PushFront(Step s) { steps_.push_front(std::move(s)); }

  // A fixed tag name, then `<|sep|>`.
  Step Tag(const std::string& name) const { return Part(c_->Tag(name), c_->options().markers.sep); }

  std::shared_ptr<const engine::TokenConstraint> CallTags() const {
    std::vector<std::string> texts;
    for (const XtmlTool& t : c_->options().tools) {
      texts.push_back(absl::StrCat("call tool=\"", XtmlAttributeValue(t.name), "\" index=\"",
                                   calls_ + 1, "\""));
    }
    return c_->TextThen(std::move(texts), c_->options().markers.sep);
  }

  const std::vector<XtmlArgument>& Arguments() const {
    return c_->options().tools[static_cast<size_t>(tool_)].arguments;
  }
  bool RequiredLeft() const {
    const std::vector<XtmlArgument>& args = Arguments();
    for (size_t i = next_argument_; i < args.size(); ++i) {
      if (args[i].required) return true;
    }
    return false;
  }
  // The properties that may come next: in schema order, up to the first required one left.
  std::pair<size_t, size_t> ArgumentRange() const {
    const std::vector<XtmlArgument>& args = Arguments();
    size_t end = next_argument_;
    while (end < args.size()) {
      if (args[end++].required) break;
    }
    return {next_argument_, end};
  }
  static std::string ArgumentTag(const XtmlArgument& a, const XtmlArgumentForm& f) {
    return absl::StrCat("argument key=\"", XtmlAttributeValue(a.key), "\" type=\"", f.type, "\"");
  }
  std::shared_ptr<const engine::TokenConstraint> ArgumentTags() const {
    std::vector<std::string> texts;
    const auto [begin, end] = ArgumentRange();
    for (size_t i = begin; i < end; ++i) {
      for (const XtmlArgumentForm& f : Arguments()[i].forms) {
        texts.push_back(ArgumentTag(Arguments()[i], f));
      }
    }
    return c_->TextThen(std::move(texts), c_->options().markers.sep);
  }

  void AcceptReasoning(int32_t token) {
    const XtmlMarkers& m = c_->options().markers;
    if (token == m.close) {
      after_close_ = true;
      think_text_.clear();
      return;
    }
    if (!after_close_) return;
    if (token == m.sep && think_text_ == "think") return Next();
    const std::string& bytes = TokenText(token);
    if (bytes.empty() || think_text_.size() + bytes.size() > 5) {
      after_close_ = false;
      return;
    }
    think_text_ += bytes;
    if (std::string_view("think").substr(0, think_text_.size()) != think_text_) {
      after_close_ = false;
    }
  }

  // A part ends with its end id: `<|sep|>` after a tag, `<|close|>` after a body (its matcher
  // allows that id only once the part is complete).
  void AcceptPart(int32_t token) {
    const Step& s = steps_.front();
    if (token != s.id) {
      text_ += TokenText(token);
      part_->Accept(token);
      return;
    }
    const PartRole role = s.role;
    const std::string text = std::move(text_);
    Next();
    if (role == PartRole::kCallTag) return StartCall(text);
    if (role == PartRole::kArgumentTag) return StartArgument(text);
  }

  void StartCall(const std::string& tag) {
    const std::vector<XtmlTool>& tools = c_->options().tools;
    tool_ = -1;
    for (size_t i = 0; i < tools.size(); ++i) {
      if (tag == absl::StrCat("call tool=\"", XtmlAttributeValue(tools[i].name), "\" index=\"",
                              calls_ + 1, "\"")) {
        tool_ = static_cast<int>(i);
      }
    }
    if (tool_ < 0) return Abandon();  // the tag matcher only ends after a whole tag
    ++calls_;
    next_argument_ = 0;
    PushFront({StepKind::kArgumentOrClose});
    Enter();
  }

  void StartArgument(const std::string& tag) {
    const auto [begin, end] = ArgumentRange();
    for (size_t i = begin; i < end; ++i) {
      for (const XtmlArgumentForm& f : Arguments()[i].forms) {
        if (tag != ArgumentTag(Arguments()[i], f)) continue;
        next_argument_ = i + 1;
        const int32_t close = c_->options().markers.close;
        PushFront({StepKind::kArgumentOrClose});
        PushFront(Tag("argument"));
        PushFront(
            Part(std::make_shared<JsonConstraint>(f.body, c_->vocab(), std::vector<int32_t>{close}),
                 close));
        return Enter();
      }
    }
    Abandon();
  }

  // The front step is done: on to the next one.
  void Next() {
    steps_.pop_front();
    Enter();
  }

  // Sets up the front step's matcher.
  void Enter() {
    CHECK(!steps_.empty());
    text_.clear();
    const Step& s = steps_.front();
    if (s.kind == StepKind::kPart) {
      part_ = s.part->NewMatcher();
    } else {
      part_.reset();
    }
    if (s.kind == StepKind::kReasoning) after_close_ = false;
  }

  // A token no mask allowed (an executor that ignored the mask): nothing is constrained any
  // more but the end.
  void Abandon() {
    steps_.clear();
    steps_.push_back({StepKind::kDone});
    Enter();
  }

  const std::string& TokenText(int32_t token) const {
    static const std::string kNone;
    const TokenVocab& v = *c_->vocab();
    return token >= 0 && token < v.size() ? v.bytes(token) : kNone;
  }

  // Masks every id but `ids`.
  void AllowOnly(float* logits, int64_t vocab, const std::vector<int32_t>& ids) {
    bits_.assign(static_cast<size_t>((vocab + 63) / 64), 0);
    for (int32_t id : ids) {
      if (id >= 0 && id < vocab) bits_[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
    }
    MaskLogitsOutside(bits_, logits, vocab);
  }

  const XtmlReplyConstraint* c_;  // held by the sampler's params, which outlive this matcher
  std::deque<Step> steps_;        // never empty: the last is kDone
  std::unique_ptr<engine::TokenMatcher> part_;  // the front kPart step's
  std::string text_;                            // the front kPart's text so far
  std::vector<uint64_t> bits_;
  // Reasoning: a `C` came, then think_text_ (a prefix of "think").
  bool after_close_ = false;
  std::string think_text_;
  int calls_ = 0;
  int tool_ = -1;             // the current call's tool
  size_t next_argument_ = 0;  // the current call's arguments before this one are done
};

}  // namespace

std::string XtmlAttributeValue(const std::string& value) {
  return absl::StrReplaceAll(absl::StrReplaceAll(value, {{"&", "&amp;"}}), {{"\"", "&quot;"}});
}

absl::StatusOr<XtmlTool> XtmlToolFor(std::string name, const JsonGrammar& parameters) {
  const SchemaNode& root = parameters.nodes[static_cast<size_t>(parameters.root)];
  if (root.kind != NodeKind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tool '", name,
        "': a forced Kimi K3 tool call needs `parameters` to be an object schema (type "
        "\"object\", with `properties` for its arguments)"));
  }
  XtmlTool tool;
  tool.name = std::move(name);
  for (const SchemaProperty& p : root.properties) {
    XtmlArgument a;
    a.key = Json::parse(absl::StrCat("\"", p.key_text)).get<std::string>();
    a.required = p.required;
    FormCollector forms(parameters);
    RETURN_IF_ERROR(forms.Add(p.value, p.value));
    a.forms = forms.Take();
    if (a.forms.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool '", tool.name, "', argument '", a.key, "': no value fits its schema"));
    }
    tool.arguments.push_back(std::move(a));
  }
  return tool;
}

XtmlReplyConstraint::XtmlReplyConstraint(XtmlReplyOptions options,
                                         std::shared_ptr<const TokenVocab> vocab)
    : options_(std::move(options)), vocab_(std::move(vocab)) {
  CHECK(vocab_ != nullptr);
  CHECK((options_.response != nullptr) != !options_.tools.empty());
  CHECK_GE(options_.max_calls, 1);
  const XtmlMarkers& m = options_.markers;
  CHECK(m.open >= 0 && m.close >= 0 && m.sep >= 0 && m.end_of_message >= 0);
  for (const char* name : {"response", "tools", "call", "argument", "message"}) {
    tags_.emplace_back(name, TextThen({name}, m.sep));
  }
}

std::unique_ptr<engine::TokenMatcher> XtmlReplyConstraint::NewMatcher() const {
  return std::make_unique<XtmlMatcher>(this);
}

std::shared_ptr<const engine::TokenConstraint> XtmlReplyConstraint::TextThen(
    std::vector<std::string> texts, int32_t end_id) const {
  return std::make_shared<JsonConstraint>(
      std::make_shared<JsonGrammar>(ExactTextGrammar(std::move(texts))), vocab_,
      std::vector<int32_t>{end_id});
}

const std::shared_ptr<const engine::TokenConstraint>& XtmlReplyConstraint::Tag(
    const std::string& name) const {
  for (const auto& [tag, constraint] : tags_) {
    if (tag == name) return constraint;
  }
  CHECK(false) << "no XTML tag constraint " << name;
  return tags_.front().second;
}

}  // namespace strata::structured
