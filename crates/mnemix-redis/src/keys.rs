//! The key schema (see the crate docs): one hash tag per scope, the kind before any raw id.

use mnemix_core::{ConversationId, Namespace, Scope, WorkingMemoryKey};

/// Makes every key of a store.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// Percent-encodes what would end a hash tag early or blur its `namespace:subject` split.
fn tag_part(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of everything a scope owns (one slot).
    pub(crate) fn scope(&self, scope: &Scope) -> ScopeKeys {
        let subject = scope.subject().map_or("", |s| s.as_str());
        ScopeKeys {
            base: format!(
                "{}:{{{}:{}}}:",
                self.prefix,
                tag_part(scope.namespace().as_str()),
                tag_part(subject)
            ),
        }
    }

    /// The set of namespaces that hold data (its own slot): what `namespaces` lists.
    pub(crate) fn namespaces(&self) -> String {
        format!("{}:namespaces", self.prefix)
    }

    /// The keys of a namespace's own data (one slot).
    pub(crate) fn namespace(&self, namespace: &Namespace) -> NamespaceKeys {
        NamespaceKeys {
            base: format!("{}:{{{}}}:", self.prefix, tag_part(namespace.as_str())),
        }
    }
}

/// Keys of one scope.
pub(crate) struct ScopeKeys {
    base: String,
}

impl ScopeKeys {
    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}{id}", self.base)
    }

    /// The scope's key prefix, for scripts that build keys of the same slot.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    pub(crate) fn conversations(&self) -> String {
        self.key("convs", "")
    }
    pub(crate) fn conversation(&self, id: &ConversationId) -> String {
        self.key("c:", id.as_str())
    }
    pub(crate) fn messages(&self, id: &ConversationId) -> String {
        self.key("cm:", id.as_str())
    }
    pub(crate) fn message_ids(&self, id: &ConversationId) -> String {
        self.key("ci:", id.as_str())
    }
    pub(crate) fn cursors(&self, id: &ConversationId) -> String {
        self.key("cc:", id.as_str())
    }
    pub(crate) fn working(&self, key: &WorkingMemoryKey) -> String {
        match key {
            WorkingMemoryKey::User => self.key("w", ""),
            WorkingMemoryKey::Conversation(id) => self.key("cw:", id.as_str()),
        }
    }
    pub(crate) fn checkpoint(&self, id: &str) -> String {
        self.key("k:", id)
    }
    pub(crate) fn suspended(&self) -> String {
        self.key("ks", "")
    }
    pub(crate) fn checkpoint_ids(&self) -> String {
        self.key("ka", "")
    }
    pub(crate) fn facts(&self) -> String {
        self.key("fs", "")
    }
    pub(crate) fn current_facts(&self) -> String {
        self.key("fc", "")
    }
    pub(crate) fn expiring_facts(&self) -> String {
        self.key("fx", "")
    }
    pub(crate) fn fact(&self, id: &str) -> String {
        self.key("f:", id)
    }
    pub(crate) fn fact_token(&self, token: &str) -> String {
        self.key("ft:", token)
    }
    /// The version token of the scope's facts: a fresh value set by every write of them.
    pub(crate) fn facts_version(&self) -> String {
        self.key("fv", "")
    }
    pub(crate) fn fact_versions(&self, key: &str) -> String {
        self.key("fh:", key)
    }
    pub(crate) fn vectors(&self, incarnation: &str) -> String {
        self.key("v:", incarnation)
    }
    /// The version token of `v:N`: a fresh value set by every write of those records.
    pub(crate) fn vector_token(&self, incarnation: &str) -> String {
        self.key("vt:", incarnation)
    }
    pub(crate) fn vector_incarnations(&self) -> String {
        self.key("vc", "")
    }
}

/// Keys of one namespace's own data.
pub(crate) struct NamespaceKeys {
    base: String,
}

impl NamespaceKeys {
    pub(crate) fn base(&self) -> &str {
        &self.base
    }
    /// The subjects (`""` for the shared scope) that have held data: what `scopes` checks.
    pub(crate) fn subjects(&self) -> String {
        format!("{}subjects", self.base)
    }
    pub(crate) fn collections(&self) -> String {
        format!("{}cols", self.base)
    }
    pub(crate) fn collection_counter(&self) -> String {
        format!("{}colseq", self.base)
    }
    /// The scope prefixes holding records of a collection incarnation.
    pub(crate) fn collection_holders(&self, incarnation: &str) -> String {
        format!("{}vs:{incarnation}", self.base)
    }
    pub(crate) fn cache_entry(&self, key: &str) -> String {
        format!("{}e:{key}", self.base)
    }
    pub(crate) fn cache_index(&self) -> String {
        format!("{}es", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_tag_ends_at_its_own_brace_whatever_the_names_hold() {
        let keys = Keys::new("am");
        let scope = Scope::new("ns", "s}u:b{%").unwrap();
        let id = ConversationId::new("c}1").unwrap();
        let key = keys.scope(&scope).conversation(&id);
        assert_eq!(key, "am:{ns:s%7Du%3Ab%7B%25}:c:c}1");
        let tag = &key[key.find('{').unwrap() + 1..];
        let tag = &tag[..tag.find('}').unwrap()];
        assert_eq!(tag, "ns:s%7Du%3Ab%7B%25");
    }

    #[test]
    fn shared_scope_subject_and_namespace_data_have_distinct_tags() {
        let keys = Keys::new("am");
        let shared = Scope::shared("ns").unwrap();
        assert_eq!(keys.scope(&shared).conversations(), "am:{ns:}:convs");
        let ns = Namespace::new("ns").unwrap();
        assert_eq!(keys.namespace(&ns).cache_index(), "am:{ns}:es");
    }
}
