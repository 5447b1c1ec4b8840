//! Gossip state comes from any node that can reach the gossip port (with
//! a cluster key, any node that holds it): whatever keys and values a
//! node publishes, `Member::from_state` gives a member exactly when the
//! required keys parse, with every field read as published, or `None`;
//! never a panic. Views built from such members answer every question.
//! Long run:
//! `PROPTEST_CASES=100000 cargo test -p cohort --lib membership`.

use super::*;
use proptest::collection::btree_map;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    // `proptest!` lets PROPTEST_CASES override this.
    ProptestConfig::with_cases(512)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(vec![
            keys::ROLES,
            keys::HTTP,
            keys::SLOTS,
            keys::VERSION,
            keys::MASTER_EPOCH,
            keys::STATUS,
            keys::MASTER_SEEN,
        ])
        .prop_map(String::from),
        // Not `any::<String>()`: a key whose first character takes more
        // than one byte panics inside chitchat before `from_state` sees it
        // (see `a_key_starting_with_a_wide_character_is_stored`).
        1 => ("[ -~]", any::<String>()).prop_map(|(first, rest)| first + &rest),
    ]
}

/// Values of the right shape, of nearly the right shape, and anything.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "(back-end|worker|front-end|boss| |,){0,5}",
        "[+-]?[0-9]{0,22}",
        proptest::sample::select(vec!["ready", "leaving", "", "http://127.0.0.1:1"])
            .prop_map(String::from),
        any::<String>(),
    ]
}

fn member_state() -> impl Strategy<Value = (ChitchatId, BTreeMap<String, String>)> {
    let id = (any::<String>(), any::<u64>(), any::<SocketAddr>())
        .prop_map(|(node_id, generation, addr)| ChitchatId::new(node_id, generation, addr));
    (id, btree_map(key(), value(), 0..8))
}

fn parse(id: &ChitchatId, published: &BTreeMap<String, String>) -> Option<Member> {
    let mut state = NodeState::for_test();
    for (key, value) in published {
        state.set(key, value);
    }
    Member::from_state(id, &state)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_gossip_state_is_a_member_read_as_published_or_none(
        (id, published) in member_state(),
    ) {
        let get = |key: &str| published.get(key).map(String::as_str);
        let required = (
            get(keys::ROLES).and_then(|r| Roles::parse(r).ok()),
            get(keys::HTTP),
            get(keys::SLOTS).and_then(|s| s.parse::<u32>().ok()),
        );
        match (parse(&id, &published), required) {
            (Some(member), (Some(roles), Some(http), Some(slots))) => {
                prop_assert_eq!(&member.node_id, &*id.node_id);
                prop_assert_eq!(member.generation, id.generation_id);
                prop_assert_eq!(member.roles, roles);
                prop_assert_eq!(member.http.as_str(), http);
                prop_assert_eq!(member.slots, slots);
                prop_assert_eq!(member.version.as_str(), get(keys::VERSION).unwrap_or(""));
                let epoch = get(keys::MASTER_EPOCH).and_then(|e| e.parse().ok());
                prop_assert_eq!(member.master_epoch, epoch);
                prop_assert_eq!(member.leaving, get(keys::STATUS) == Some("leaving"));
                prop_assert_eq!(member.master_seen.as_str(), get(keys::MASTER_SEEN).unwrap_or(""));
            }
            (None, (Some(_), Some(_), Some(_))) => {
                prop_assert!(false, "required keys parse but no member: {published:?}");
            }
            (Some(member), _) => {
                prop_assert!(false, "a member without its required keys: {member:?}");
            }
            (None, _) => {}
        }
    }

    #[test]
    fn views_of_any_members_answer_every_question(
        states in proptest::collection::vec(member_state(), 0..6),
        me in any::<String>(),
    ) {
        let members: Vec<Member> = states.iter().filter_map(|(id, kv)| parse(id, kv)).collect();
        let view = View { me, members, dead: Vec::new() }.sorted();
        let oldest = view.oldest_back_end();
        prop_assert!(oldest.is_none_or(|m| m.roles.back_end && !m.leaving));
        prop_assert!(view.successor().is_none_or(|m| m.node_id != view.me));
        prop_assert!(view.master_host().is_none_or(|m| m.master_epoch.is_some()));
        prop_assert!(view.back_ends().all(|m| m.roles.back_end));
    }
}
