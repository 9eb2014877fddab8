// The host's error type and must-check results, and the one place where
// C++ errors become the C API's bp_error objects.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "backplane/backplane.h"
#include "text.hpp"

namespace backplane {

// A structured error: a stable code, a one-line message naming the thing
// and the reason, and context fields (operation, dtype, devices, plugin,
// file, alternatives, hint, ...). Built only on failure paths. Every
// string put in is made valid UTF-8 on one line here (text.hpp), so a
// plugin's message or a file name cannot break what the C API hands out.
class Error {
 public:
  Error(bp_code code, std::string message) : code_(code), message_(one_line_utf8(message)) {}

  bp_code code() const { return code_; }
  const std::string &message() const { return message_; }
  const nlohmann::json &context() const { return context_; }

  Error &with(const std::string &key, nlohmann::json value) & {
    make_one_line_utf8(value);
    context_[one_line_utf8(key)] = std::move(value);
    return *this;
  }
  Error &&with(const std::string &key, nlohmann::json value) && { return std::move(with(key, std::move(value))); }
  Error &&hint(std::string text) && { return std::move(*this).with("hint", std::move(text)); }
  // Errors that gather several problems (a fleet that fails to load).
  const std::vector<Error> &problems() const { return problems_; }
  Error &&with_problems(std::vector<Error> problems) && {
    problems_ = std::move(problems);
    return std::move(*this);
  }
  // Prefixes the message with where the error travelled through.
  Error &&prefix(const std::string &where) && {
    message_ = one_line_utf8(where) + ": " + message_;
    return std::move(*this);
  }

 private:
  bp_code code_;
  std::string message_;
  nlohmann::json context_ = nlohmann::json::object();
  std::vector<Error> problems_;
};

// Success, or the Error that prevented it. Success allocates nothing.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::make_unique<Error>(std::move(error))) {}
  bool ok() const { return error_ == nullptr; }
  explicit operator bool() const { return ok(); }
  const Error &error() const { return *error_; }
  Error take_error() { return std::move(*error_); }

 private:
  std::unique_ptr<Error> error_;
};

// A value, or the Error that prevented it.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}
  Expected(Error error) : state_(std::move(error)) {}
  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T &value() { return std::get<0>(state_); }
  T &operator*() { return value(); }
  T *operator->() { return &value(); }
  const Error &error() const { return std::get<1>(state_); }
  Error take_error() { return std::move(std::get<1>(state_)); }

 private:
  std::variant<T, Error> state_;
};

// The C API's error object: owns the text the accessors hand out, all of
// it computed once at creation so that const access is thread-safe.
bp_error *to_c_error(Error error);
bp_error *to_c_error(Status status);  // NULL when ok
// A preallocated error for when building one runs out of memory;
// bp_error_destroy knows not to free it.
bp_error *out_of_memory_error();
// A copy of a C error's content (for errors the host keeps and lists).
Error from_c_error(const bp_error *error);

}  // namespace backplane
