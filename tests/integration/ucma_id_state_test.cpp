// The rdma_cm id state machine (kmod-shim/ucma_ids.h): the transitions an
// iWARP id takes in the kernel's cma.c are allowed, the others are not, and
// the id table hands out distinct, findable handles.
#include <gtest/gtest.h>

#include "kmod-shim/ucma_ids.h"

namespace iwemu::shim {
namespace {

using S = CmIdState;

TEST(UcmaIdState, ActiveSidePath) {
    EXPECT_TRUE(cm_id_transition_allowed(S::idle, S::addr_query));
    EXPECT_TRUE(cm_id_transition_allowed(S::addr_bound, S::addr_query));
    EXPECT_TRUE(cm_id_transition_allowed(S::addr_query, S::addr_resolved));
    EXPECT_TRUE(cm_id_transition_allowed(S::addr_resolved, S::route_query));
    EXPECT_TRUE(cm_id_transition_allowed(S::route_query, S::route_resolved));
    EXPECT_TRUE(cm_id_transition_allowed(S::route_resolved, S::connect));
    EXPECT_TRUE(cm_id_transition_allowed(S::connect, S::disconnect));
}

TEST(UcmaIdState, PassiveSidePath) {
    EXPECT_TRUE(cm_id_transition_allowed(S::idle, S::addr_bound));
    EXPECT_TRUE(cm_id_transition_allowed(S::addr_bound, S::listen));
    EXPECT_TRUE(cm_id_transition_allowed(S::idle, S::listen));  // rdma_listen binds 0.0.0.0:0
    EXPECT_TRUE(cm_id_transition_allowed(S::listen, S::listen));  // new backlog
}

TEST(UcmaIdState, ForbiddenShortcuts) {
    EXPECT_FALSE(cm_id_transition_allowed(S::idle, S::connect));           // CONNECT before resolving
    EXPECT_FALSE(cm_id_transition_allowed(S::addr_resolved, S::connect));  // before RESOLVE_ROUTE
    EXPECT_FALSE(cm_id_transition_allowed(S::listen, S::connect));
    EXPECT_FALSE(cm_id_transition_allowed(S::listen, S::addr_query));
    EXPECT_FALSE(cm_id_transition_allowed(S::addr_bound, S::addr_bound));  // BIND twice
    EXPECT_FALSE(cm_id_transition_allowed(S::disconnect, S::connect));
    EXPECT_FALSE(cm_id_transition_allowed(S::destroying, S::idle));
}

TEST(UcmaIdState, DestroyingFromEverywhereOnce) {
    for (auto s : {S::idle, S::addr_query, S::addr_resolved, S::route_query, S::route_resolved,
                   S::connect, S::disconnect, S::addr_bound, S::listen}) {
        EXPECT_TRUE(cm_id_transition_allowed(s, S::destroying)) << to_string(s);
    }
    EXPECT_FALSE(cm_id_transition_allowed(S::destroying, S::destroying));
}

TEST(UcmaIdState, SetStateRefusesAndKeepsState) {
    std::lock_guard lock(ucma_lock());
    UcmaId* id = ucma_id_create(nullptr);
    ASSERT_NE(id, nullptr);
    EXPECT_FALSE(ucma_id_set_state(*id, S::connect));
    EXPECT_EQ(id->state, S::idle);
    EXPECT_TRUE(ucma_id_set_state(*id, S::addr_bound));
    EXPECT_EQ(id->state, S::addr_bound);
    ucma_id_erase(id->handle);
}

TEST(UcmaIdTable, DistinctHandlesAndLookup) {
    std::lock_guard lock(ucma_lock());
    UcmaId* a = ucma_id_create(nullptr);
    UcmaId* b = ucma_id_create(nullptr);
    ASSERT_NE(a->handle, b->handle);
    EXPECT_EQ(ucma_id_find(a->handle), a);
    uint32_t gone = b->handle;
    ucma_id_erase(gone);
    EXPECT_EQ(ucma_id_find(gone), nullptr);
    UcmaId* c = ucma_id_create(nullptr);
    EXPECT_NE(c->handle, gone);  // not reused at once: stale CM callbacks find nothing
    ucma_conn_bind(77, c->handle);
    EXPECT_EQ(ucma_conn_find(77), c->handle);
    ucma_conn_unbind(77);
    EXPECT_EQ(ucma_conn_find(77), no_handle);
    ucma_id_erase(a->handle);
    ucma_id_erase(c->handle);
}

}  // namespace
}  // namespace iwemu::shim
