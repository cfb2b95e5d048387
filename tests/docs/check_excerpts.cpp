// Checks that code shown in the docs is the code that compiles: every
// fenced block preceded by `<!-- excerpt: PATH -->` must appear in PATH
// (relative to the repository root) as consecutive lines, trailing spaces
// ignored. Exits 1 naming each excerpt that drifted, 2 on usage errors.
//
// Usage: caf_collective_check_excerpts REPO_ROOT DOC.md...
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string rstrip(std::string line) {
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r'))
    line.pop_back();
  return line;
}

bool read_lines(const std::string& path, std::vector<std::string>& lines) {
  std::ifstream in{path};
  if (!in) return false;
  std::string line;
  while (std::getline(in, line))
    lines.push_back(rstrip(line));
  return true;
}

bool contains_run(const std::vector<std::string>& haystack,
                  const std::vector<std::string>& run) {
  if (run.empty()) return false;
  for (size_t i = 0; i + run.size() <= haystack.size(); ++i) {
    size_t j = 0;
    while (j < run.size() && haystack[i + j] == run[j])
      ++j;
    if (j == run.size()) return true;
  }
  return false;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s REPO_ROOT DOC.md...\n", argv[0]);
    return 2;
  }
  std::string root = argv[1];
  const std::string marker = "<!-- excerpt: ";
  int checked = 0;
  int drifted = 0;
  for (int d = 2; d < argc; ++d) {
    std::vector<std::string> doc;
    if (!read_lines(argv[d], doc)) {
      std::fprintf(stderr, "cannot read %s\n", argv[d]);
      return 2;
    }
    for (size_t i = 0; i < doc.size(); ++i) {
      if (doc[i].rfind(marker, 0) != 0) continue;
      auto end = doc[i].find(" -->");
      auto path = doc[i].substr(marker.size(), end - marker.size());
      // The block: from the fence after the marker to the closing fence.
      std::vector<std::string> block;
      size_t j = i + 1;
      if (j >= doc.size() || doc[j].rfind("```", 0) != 0) {
        std::printf("%s:%zu: excerpt marker not followed by a code block\n",
                    argv[d], i + 1);
        ++drifted;
        continue;
      }
      for (++j; j < doc.size() && doc[j].rfind("```", 0) != 0; ++j)
        block.push_back(doc[j]);
      std::vector<std::string> source;
      ++checked;
      if (!read_lines(root + "/" + path, source)) {
        std::printf("%s:%zu: cannot read %s\n", argv[d], i + 1, path.c_str());
        ++drifted;
      } else if (!contains_run(source, block)) {
        std::printf("%s:%zu: the excerpt is no longer in %s\n", argv[d], i + 1,
                    path.c_str());
        ++drifted;
      }
    }
  }
  std::printf("%d excerpts checked, %d drifted\n", checked, drifted);
  return drifted == 0 && checked > 0 ? 0 : 1;
}
