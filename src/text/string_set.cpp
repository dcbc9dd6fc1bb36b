#include "text/string_set.h"

#include <algorithm>

namespace toy::text {

StringSet::StringSet(const std::vector<std::string> &strings) {
    nodes_.emplace_back();
    for (size_t i = 0; i < strings.size(); ++i) {
        State at = kStart;
        for (unsigned char c : strings[i]) {
            const auto added = (State)nodes_.size();
            State &child = at == kStart ? root_[c] : edges_.try_emplace(key(at, c), added).first->second;
            if (at == kStart && child == kStart) child = added;
            if (child == added) nodes_.push_back({nodes_[at].depth + 1, at, c});
            at = child;
        }
        if (at != kStart && nodes_[at].index < 0) nodes_[at].index = (int32_t)i;
    }
    // fallbacks, shallower states first (a counting sort by depth): a state's
    // is found from its parent's, which is shallower
    fail_.assign(nodes_.size(), kStart);
    std::vector<uint32_t> first(2, 0);
    for (const Node &n : nodes_) {
        if (first.size() < n.depth + 2) first.resize(n.depth + 2, 0);
        ++first[n.depth + 1];
    }
    for (size_t d = 1; d < first.size(); ++d) first[d] += first[d - 1];
    std::vector<State> order(nodes_.size());
    for (State v = 0; v < order.size(); ++v) order[first[nodes_[v].depth]++] = v;
    for (State v : order) {
        Node &n = nodes_[v];
        if (n.depth < 2) continue;  // the start and its children fall back to the start
        const State f = next(fail_[n.parent], n.byte);
        fail_[v] = f;
        n.shorter = nodes_[f].index >= 0 ? f : nodes_[f].shorter;
    }
}

bool StringSet::found_in(std::string_view text) const {
    State s = kStart;
    for (unsigned char c : text) {
        s = next(s, c);
        if (nodes_[s].index >= 0 || nodes_[s].shorter != kStart) return true;
    }
    return false;
}

}  // namespace toy::text
