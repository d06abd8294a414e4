// docs/reproduce-figures.md parsed (reproduce.hpp: FigureDocs): the figures' sections and the
// trainings' measured seconds. The build embeds the file's text (figure_docs_text.cpp.in).
#include <cstdlib>
#include <sstream>

#include "core/errors.hpp"
#include "reproduce/reproduce.hpp"

namespace qkvlab::reproduce {

extern const char* const kFigureDocsText;  // the build's copy of docs/reproduce-figures.md

namespace {

// "PREFIX rest" → rest, or empty when the line does not start with the prefix.
bool take(const std::string& line, const std::string& prefix, std::string& rest) {
  if (line.rfind(prefix, 0) != 0) return false;
  rest = line.substr(prefix.size());
  return true;
}

double seconds_of(const std::string& section, const std::string& text) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(s >= 0))
    throw UsageError("docs/reproduce-figures.md, section " + section + ": seconds \"" + text + "\" is not a number");
  return s;
}

}  // namespace

FigureDocs parse_figure_docs(const std::string& text) {
  FigureDocs docs;
  std::istringstream in(text);
  std::string line, section, rest;
  FigureDoc* figure = nullptr;
  auto fail = [&](const std::string& what) { throw UsageError("docs/reproduce-figures.md, section " + section + ": " + what); };
  while (std::getline(in, line)) {
    if (take(line, "## ", rest)) {
      section = rest, figure = nullptr;
      if (section == "trainings") continue;
      if (docs.figures.count(section)) fail("a second section of the name");
      figure = &docs.figures[section];
    } else if (line.empty() || section.empty()) {
      continue;
    } else if (!figure) {  // trainings: "NAME: SECONDS"
      const auto colon = line.find(": ");
      if (colon != std::string::npos) docs.trainings[line.substr(0, colon)] = seconds_of(section, line.substr(colon + 2));
    } else if (take(line, "remakes: ", rest)) {
      if (!figure->remakes.empty()) fail("a second remakes line");
      figure->remakes = rest;
    } else if (take(line, "seconds: ", rest)) {
      figure->seconds = rest == "not measured" ? -1 : seconds_of(section, rest);
    } else {
      if (!figure->paper.empty()) fail("a second paragraph (the paper's figure is one line)");
      figure->paper = line;
    }
  }
  for (const auto& [name, f] : docs.figures)
    if (f.remakes.empty() || f.paper.empty()) section = name, fail(f.remakes.empty() ? "no remakes line" : "no paragraph");
  return docs;
}

const FigureDocs& figure_docs() {
  static const FigureDocs docs = parse_figure_docs(kFigureDocsText);
  return docs;
}

}  // namespace qkvlab::reproduce
