#pragma once
// Validates documents with Python's own parsers (json, xml.etree) when python3 is available.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace odeserve::client::testing {

inline std::string WriteTemp(const std::string& content, const std::string& suffix) {
  std::string path = ::testing::TempDir() + "odeserve_client_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

inline bool HavePython() {
  return std::system(ODESERVE_PYTHON3 " -c 'import json, xml.etree.ElementTree' >/dev/null 2>&1") == 0;
}

/// Runs `script` (Python, reads the file at sys.argv[1]); true when it exits 0.
inline bool PythonAccepts(const std::string& content, const std::string& suffix,
                          const std::string& script) {
  const std::string path = WriteTemp(content, suffix);
  const std::string cmd = std::string(ODESERVE_PYTHON3) + " -c '" + script + "' " + path;
  return std::system(cmd.c_str()) == 0;
}

inline bool IsValidJson(const std::string& content, const std::string& extra_check = "True") {
  return PythonAccepts(content, ".json",
                       "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if (" +
                           extra_check + ") else 1)");
}

inline bool IsWellFormedXml(const std::string& content, const std::string& extra_check = "True") {
  return PythonAccepts(content, ".svg",
                       "import sys, xml.etree.ElementTree as ET; r = ET.parse(sys.argv[1]).getroot(); "
                       "sys.exit(0 if (" + extra_check + ") else 1)");
}

}  // namespace odeserve::client::testing
