// Problems found in one fleet text, and the JSON pointer and "did you mean"
// helpers every stage of fleet loading reports them with (fleet_problems.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace backplane {

// Problems found so far in one fleet text.
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}
  const std::string &file() const { return file_; }
  bool empty() const { return list_.empty(); }

  Error &add(bp_code code, const std::string &pointer, const nlohmann::json &value, const std::string &reason,
             const std::string &hint = "") {
    Error problem(code, pointer.empty() ? reason : pointer + ": " + reason);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", reason);
    if (!hint.empty()) problem.with("hint", hint);
    list_.push_back(std::move(problem));
    return list_.back();
  }
  // Adds an error built elsewhere (a refusal from dispatch) at `pointer`.
  void add(Error error, const std::string &pointer, const nlohmann::json &value) {
    Error problem(error.code(), pointer + ": " + error.message());
    for (const auto &[key, field] : error.context().items()) problem.with(key, field);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", error.message());
    list_.push_back(std::move(problem));
  }

  Error to_error() && {
    const std::string first = list_.front().message();
    const size_t count = list_.size();
    Error error(list_.front().code(), file_ + ": " + std::to_string(count) + (count == 1 ? " problem: " : " problems; first: ") + first);
    error.with("file", file_);
    return std::move(error).with_problems(std::move(list_));
  }

 private:
  std::string file_;
  std::vector<Error> list_;
};

// One JSON pointer reference token: '~' as "~0", '/' as "~1".
std::string pointer_escape(const std::string &token);

// The value at `pointer` in `document`, or null when there is none.
nlohmann::json value_at(const nlohmann::json &document, const std::string &pointer);

// "did you mean 'cpu'?" when a known name is close to `given`, else "".
std::string did_you_mean(const std::string &given, const std::vector<std::string> &known);

}  // namespace backplane
