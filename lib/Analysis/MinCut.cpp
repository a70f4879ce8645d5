//===- MinCut.cpp - Dinic's maximum flow ----------------------------------===//

#include "kiln/Analysis/MinCut.h"

#include <algorithm>
#include <deque>

namespace kiln {

unsigned FlowNetwork::addNode() {
  adjacency.emplace_back();
  return numNodes() - 1;
}

unsigned FlowNetwork::addEdge(unsigned from, unsigned to, int64_t capacity) {
  unsigned index = static_cast<unsigned>(edges.size());
  edges.push_back({to, std::min(capacity, kInfinite)});
  edges.push_back({from, 0});
  edgeFrom.push_back(from);
  edgeFrom.push_back(to);
  adjacency[from].push_back(index);
  adjacency[to].push_back(index + 1);
  return index / 2;
}

bool FlowNetwork::buildLevels(unsigned source, unsigned sink) {
  level.assign(numNodes(), -1);
  std::deque<unsigned> queue = {source};
  level[source] = 0;
  while (!queue.empty()) {
    unsigned node = queue.front();
    queue.pop_front();
    for (unsigned e : adjacency[node]) {
      const Edge &edge = edges[e];
      if (edge.capacity > 0 && level[edge.to] < 0) {
        level[edge.to] = level[node] + 1;
        queue.push_back(edge.to);
      }
    }
  }
  return level[sink] >= 0;
}

// Depth-first search for a blocking flow along strictly increasing levels;
// nextEdge remembers where each node's search stopped so every edge is
// saturated at most once per phase.
int64_t FlowNetwork::push(unsigned node, unsigned sink, int64_t limit) {
  if (node == sink)
    return limit;
  for (unsigned &i = nextEdge[node]; i < adjacency[node].size(); ++i) {
    unsigned e = adjacency[node][i];
    Edge &edge = edges[e];
    if (edge.capacity <= 0 || level[edge.to] != level[node] + 1)
      continue;
    int64_t pushed = push(edge.to, sink, std::min(limit, edge.capacity));
    if (pushed > 0) {
      edge.capacity -= pushed;
      edges[e ^ 1].capacity += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowNetwork::maxFlow(unsigned source, unsigned sink) {
  int64_t total = 0;
  while (buildLevels(source, sink)) {
    nextEdge.assign(numNodes(), 0);
    while (int64_t pushed = push(source, sink, kInfinite)) {
      total += pushed;
      if (total >= kInfinite)
        return kInfinite;
    }
  }
  return total;
}

std::vector<bool> FlowNetwork::sourceSide(unsigned source) const {
  std::vector<bool> reached(numNodes(), false);
  std::vector<unsigned> stack = {source};
  reached[source] = true;
  while (!stack.empty()) {
    unsigned node = stack.back();
    stack.pop_back();
    for (unsigned e : adjacency[node])
      if (edges[e].capacity > 0 && !reached[edges[e].to]) {
        reached[edges[e].to] = true;
        stack.push_back(edges[e].to);
      }
  }
  return reached;
}

std::vector<bool> FlowNetwork::reachesSink(unsigned sink) const {
  std::vector<bool> reached(numNodes(), false);
  std::vector<unsigned> stack = {sink};
  reached[sink] = true;
  while (!stack.empty()) {
    unsigned node = stack.back();
    stack.pop_back();
    // Edge e leaves `node`; its pair e ^ 1 enters it from edges[e].to.
    for (unsigned e : adjacency[node]) {
      unsigned from = edges[e].to;
      if (edges[e ^ 1].capacity > 0 && !reached[from]) {
        reached[from] = true;
        stack.push_back(from);
      }
    }
  }
  return reached;
}

bool FlowNetwork::isCut(unsigned edge, const std::vector<bool> &side) const {
  return side[edgeFrom[2 * edge]] && !side[edges[2 * edge].to];
}

} // namespace kiln
