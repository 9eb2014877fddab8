// Fleet files (fleet.cpp); what other parts of the host share with it.
#pragma once

#include <string>
#include <vector>

namespace backplane {

// "did you mean 'cpu'?" when a known name is close to `given`, else "".
std::string did_you_mean(const std::string &given, const std::vector<std::string> &known);

}  // namespace backplane
