//! Registry fixtures written as declarative YAML, the way an operator writes resources.

use gatehouse_registry::{Command, Proposal, Registry, Resource, documents};
use uuid::Uuid;

/// One tenant named `name`, as a YAML document.
pub fn tenant(name: &str) -> String {
    format!("apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{}}\n")
}

/// The resources of a YAML stream, after checking that it parses without a problem.
pub fn resources(yaml: &str) -> Vec<Resource> {
    let parsed = documents::parse("test.yaml", yaml);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    parsed.into_resources()
}

/// A registry holding the resources of a YAML stream, put by one command at log index 1.
pub fn registry(yaml: &str) -> Registry {
    let mut registry = Registry::new();
    let proposal = Proposal {
        request_id: Uuid::from_u128(1),
        at: 0,
        command: Command::Put {
            resources: resources(yaml),
        },
    };
    registry
        .apply(1, &proposal)
        .expect("the test registry applies");
    registry
}
