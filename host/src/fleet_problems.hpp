// Problems found in one fleet text, and the JSON pointer and "did you mean"
// helpers every stage of fleet loading reports them with (fleet_problems.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace backplane {

// "did you mean 'cpu'?" when a known name is close to `given`, else "".
// Bounded: names longer than max_suggested_name_bytes are not compared, and
// each comparison stops once it cannot beat the best so far, so one call
// costs at most O(known.size() * 64 * 64).
constexpr size_t max_suggested_name_bytes = 64;
std::string did_you_mean(const std::string &given, const std::vector<std::string> &known);

// Problems found so far in one fleet text. At most max_listed are kept:
// once full(), the stages stop checking (a file with one mistake repeated a
// million times costs bounded time and memory), later ones are dropped, and
// the error ends with a problem saying so. "did you mean" is worked out for at most
// max_suggestions problems of a file.
class Problems {
 public:
  static constexpr size_t max_listed = 100;
  static constexpr size_t max_suggestions = 20;

  explicit Problems(std::string file) : file_(std::move(file)) {}
  const std::string &file() const { return file_; }
  bool empty() const { return list_.empty(); }
  size_t size() const { return list_.size(); }
  bool full() const { return list_.size() >= max_listed; }

  Error &add(bp_code code, const std::string &pointer, const nlohmann::json &value, const std::string &reason,
             const std::string &hint = "") {
    if (full()) return dropped_ = Error(code, "");
    Error problem(code, pointer.empty() ? reason : pointer + ": " + reason);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", reason);
    if (!hint.empty()) problem.with("hint", hint);
    list_.push_back(std::move(problem));
    return list_.back();
  }
  // Adds an error built elsewhere (a refusal from dispatch) at `pointer`.
  void add(Error error, const std::string &pointer, const nlohmann::json &value) {
    if (full()) return;
    Error problem(error.code(), pointer + ": " + error.message());
    for (const auto &[key, field] : error.context().items()) problem.with(key, field);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", error.message());
    list_.push_back(std::move(problem));
  }

  // did_you_mean(given, known()), while this file's budget lasts; `known`
  // builds the candidates only then.
  template <typename Known>
  std::string suggest(const std::string &given, Known &&known) {
    if (suggestions_made_ >= max_suggestions || full()) return "";
    ++suggestions_made_;
    return did_you_mean(given, known());
  }

  Error to_error() && {
    const bool stopped = full();
    const size_t count = list_.size();
    const std::string count_text = (stopped ? "at least " : "") + std::to_string(count);
    const std::string first = list_.front().message();
    if (stopped) {
      const std::string reason = "checking stopped after the first " + std::to_string(max_listed) +
                                 " problems; there may be more";
      Error more(BP_CONFIG, reason);
      more.with("file", file_).with("pointer", "").with("value", nullptr).with("reason", reason);
      list_.push_back(std::move(more));
    }
    Error error(list_.front().code(),
                file_ + ": " + count_text + (count == 1 ? " problem: " : " problems; first: ") + first);
    error.with("file", file_);
    return std::move(error).with_problems(std::move(list_));
  }

 private:
  std::string file_;
  std::vector<Error> list_;
  size_t suggestions_made_ = 0;
  Error dropped_{BP_CONFIG, ""};  // what a problem past max_listed is added to
};

// One JSON pointer reference token: '~' as "~0", '/' as "~1".
std::string pointer_escape(const std::string &token);

// The value at `pointer` in `document`, or null when there is none.
nlohmann::json value_at(const nlohmann::json &document, const std::string &pointer);

}  // namespace backplane
