// bp_error: the C face of backplane::Error.
#include "error.hpp"

#include <map>

#include "names.hpp"

struct bp_error {
  bp_code code;
  std::string message;
  nlohmann::json context;
  std::string json_text;
  std::map<std::string, std::string, std::less<>> field_text;
  std::vector<std::unique_ptr<bp_error>> problems;
};

namespace backplane {

bp_error *to_c_error(Error error) {
  auto c_error = std::make_unique<bp_error>(bp_error{error.code(), error.message(), error.context(), {}, {}, {}});
  // code and message first, as a reader expects them.
  nlohmann::ordered_json whole = nlohmann::ordered_json::object();
  whole["code"] = code_name(error.code());
  whole["message"] = error.message();
  for (const auto &[key, value] : error.context().items()) {
    // "value" (the offending value of a fleet problem) is always JSON text,
    // so the string "4" and the number 4 read differently.
    const bool as_text = value.is_string() && key != "value";
    c_error->field_text[key] = as_text ? value.get<std::string>() : value.dump();
    whole[key] = value;
  }
  // Replace invalid UTF-8 (a plugin's message, a file name) rather than throw.
  if (!error.problems().empty()) {
    nlohmann::ordered_json problems = nlohmann::ordered_json::array();
    for (const Error &problem : error.problems()) {
      c_error->problems.emplace_back(to_c_error(problem));
      problems.push_back(nlohmann::ordered_json::parse(c_error->problems.back()->json_text));
    }
    whole["problems"] = std::move(problems);
    c_error->field_text["problems"] = whole["problems"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  c_error->json_text = whole.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return c_error.release();
}

bp_error *to_c_error(Status status) {
  if (status.ok()) return nullptr;
  return to_c_error(status.take_error());
}

bp_error *out_of_memory_error() {
  static bp_error instance{BP_OUT_OF_MEMORY, "out of memory while reporting an error", nlohmann::json::object(),
                           R"({"code":"OUT_OF_MEMORY","message":"out of memory while reporting an error"})", {}, {}};
  return &instance;
}

Error from_c_error(const bp_error *error) {
  Error copy(error->code, error->message);
  for (const auto &[key, value] : error->context.items()) copy.with(key, value);
  return copy;
}

}  // namespace backplane

extern "C" {

bp_code bp_error_code(const bp_error *error) { return error ? error->code : BP_OK; }

const char *bp_error_message(const bp_error *error) { return error ? error->message.c_str() : ""; }

const char *bp_error_json(const bp_error *error) { return error ? error->json_text.c_str() : "null"; }

const char *bp_error_field(const bp_error *error, const char *key) {
  if (!error || !key) return nullptr;
  auto found = error->field_text.find(std::string_view(key));
  return found == error->field_text.end() ? nullptr : found->second.c_str();
}

size_t bp_error_problem_count(const bp_error *error) { return error ? error->problems.size() : 0; }

const bp_error *bp_error_problem(const bp_error *error, size_t index) {
  return error && index < error->problems.size() ? error->problems[index].get() : nullptr;
}

void bp_error_destroy(bp_error *error) {
  if (error != backplane::out_of_memory_error()) delete error;
}

}  // extern "C"
