//===- MinCut.h - Maximum flow / minimum s-t cut ----------------*- C++ -*-===//
//
// A small directed flow network solved with Dinic's algorithm. The
// rematerialization pass cuts its node-split joint graph with it; kept
// separate so the algorithm is tested on its own.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ANALYSIS_MINCUT_H
#define KILN_ANALYSIS_MINCUT_H

#include <cstdint>
#include <limits>
#include <vector>

namespace kiln {

class FlowNetwork {
public:
  /// Capacity that no finite cut includes. Sums of finite capacities must
  /// stay below it (callers keep byte counts well under 2^62).
  static constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

  /// Adds a node and returns its index.
  unsigned addNode();
  unsigned numNodes() const { return static_cast<unsigned>(adjacency.size()); }
  /// Adds the directed edge from -> to; returns the edge index.
  unsigned addEdge(unsigned from, unsigned to, int64_t capacity);

  /// Pushes the maximum flow from `source` to `sink` and returns its value
  /// (the capacity of a minimum cut; kInfinite when no finite cut exists).
  int64_t maxFlow(unsigned source, unsigned sink);

  /// After maxFlow: nodes reachable from the source in the residual
  /// network. Edges from this side to the other form a minimum cut.
  std::vector<bool> sourceSide(unsigned source) const;

  /// After maxFlow: nodes that reach the sink in the residual network. Its
  /// complement is the largest source side of a minimum cut, so the cut
  /// edges lie as close to the sink as any minimum cut allows.
  std::vector<bool> reachesSink(unsigned sink) const;

  /// After maxFlow: whether edge `edge` crosses the minimum cut.
  bool isCut(unsigned edge, const std::vector<bool> &side) const;

private:
  struct Edge {
    unsigned to;
    int64_t capacity; // residual capacity
  };
  bool buildLevels(unsigned source, unsigned sink);
  int64_t push(unsigned node, unsigned sink, int64_t limit);

  std::vector<Edge> edges; // edge 2k is forward, 2k+1 its reverse
  std::vector<unsigned> edgeFrom;
  std::vector<std::vector<unsigned>> adjacency;
  std::vector<int> level;
  std::vector<unsigned> nextEdge;
};

} // namespace kiln

#endif // KILN_ANALYSIS_MINCUT_H
