use super::*;
use gatehouse_registry::Proposal;
use gatehouse_testkit::yaml::{registry, resources};

/// The fields refused, or an empty list.
fn refused(grants: &Grants, registry: &Registry, yaml: &str) -> Vec<String> {
    let command = Command::Put {
        resources: resources(yaml),
    };
    match grants.check(&command, registry) {
        Ok(()) => Vec::new(),
        Err(ApplyError::Invalid { problems, .. }) => {
            problems.into_iter().map(|p| p.field).collect()
        }
        Err(other) => panic!("not a validation error: {other}"),
    }
}

fn upstream(tenant: &str, spec: &str) -> String {
    format!(
        "apiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: up, tenant: {tenant}}}\n\
         spec: {spec}\n"
    )
}

fn stripe_for_acme() -> Grants {
    Grants::default().with_credential(
        "stripe",
        CredentialSource::Env("STRIPE_KEY".into()),
        &["acme"],
    )
}

#[test]
fn an_upstream_may_name_only_a_credential_granted_to_its_tenant() {
    let grants = stripe_for_acme();
    let empty = Registry::new();
    let http = |credential: &str| {
        format!("{{type: http, url: 'https://api.example', credential: {credential}}}")
    };
    assert!(refused(&grants, &empty, &upstream("acme", &http("stripe"))).is_empty());
    assert_eq!(
        refused(&grants, &empty, &upstream("globex", &http("stripe"))),
        ["spec.credential"]
    );
    assert_eq!(
        refused(&grants, &empty, &upstream("acme", &http("unknown"))),
        ["spec.credential"]
    );
    // Refused alike: the answer does not say whether another tenant's credential exists.
    let message = |yaml: &str| {
        grants
            .check(
                &Command::Put {
                    resources: resources(yaml),
                },
                &empty,
            )
            .unwrap_err()
            .to_string()
            .replace("unknown", "stripe")
    };
    assert_eq!(
        message(&upstream("globex", &http("stripe"))),
        message(&upstream("globex", &http("unknown")))
    );
    // A shared upstream is a cluster admin's: any declared credential, checked per call.
    let shared = "apiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {name: up}\n\
                  spec: {type: http, url: 'https://api.example', credential: stripe}\n";
    assert!(refused(&grants, &empty, shared).is_empty());
    assert_eq!(
        refused(&Grants::default(), &empty, shared),
        ["spec.credential"]
    );
}

#[test]
fn credentials_resolve_for_granted_tenants_and_every_tenant_only_with_a_star() {
    let grants = stripe_for_acme().with_credential(
        "search",
        CredentialSource::File("/etc/gatehouse/search.key".into()),
        &[EVERY_TENANT],
    );
    assert_eq!(
        grants.credential_for(Some("acme"), "stripe"),
        Some(&CredentialSource::Env("STRIPE_KEY".into()))
    );
    assert_eq!(grants.credential_for(Some("globex"), "stripe"), None);
    assert_eq!(grants.credential_for(None, "stripe"), None);
    assert!(grants.credential_for(Some("globex"), "search").is_some());
    assert!(grants.credential_for(None, "search").is_some());
    assert_eq!(grants.credential_for(Some("acme"), "nothing"), None);
}

#[test]
fn built_in_upstreams_and_tools_need_the_operator_to_enable_them_for_the_tenant() {
    let grants = Grants::default().with_builtins("demo", [BuiltinTool::Echo]);
    let empty = Registry::new();
    let tool = |tenant: &str, name: &str| {
        format!(
            "apiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {{name: {name}, tenant: {tenant}}}\n\
             spec: {{approvalMode: read_only}}\n"
        )
    };
    let builtin = |tenant: &str| upstream(tenant, "{type: builtin}");

    assert!(refused(&grants, &empty, &builtin("demo")).is_empty());
    assert_eq!(refused(&grants, &empty, &builtin("mallory")), ["spec.type"]);
    let shared = "apiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {name: up}\n\
                  spec: {type: builtin}\n";
    assert_eq!(refused(&grants, &empty, shared), ["metadata.tenant"]);

    // A Tool on a built-in upstream in the same apply, or already stored.
    let together = format!("{}---\n{}", builtin("demo"), tool("demo", "up.transfer"));
    assert_eq!(refused(&grants, &empty, &together), ["metadata.name"]);
    let together = format!("{}---\n{}", builtin("demo"), tool("demo", "up.echo"));
    assert!(refused(&grants, &empty, &together).is_empty());
    let stored = registry(&format!(
        "apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: mallory}}\nspec: {{}}\n---\n{}",
        builtin("mallory")
    ));
    assert_eq!(
        refused(&grants, &stored, &tool("mallory", "up.transfer")),
        ["metadata.name"]
    );
    assert_eq!(
        refused(&grants, &stored, &tool("mallory", "up.echo")),
        ["metadata.name"],
        "echo is demo's, not mallory's"
    );
    // A tool of another kind of upstream is none of this check's business.
    assert!(refused(&grants, &stored, &tool("mallory", "elsewhere.transfer")).is_empty());
}

#[test]
fn batches_are_checked_proposal_by_proposal() {
    let grants = Grants::default();
    let bad = Command::Put {
        resources: resources(&upstream("acme", "{type: builtin}")),
    };
    let batch = Command::Batch {
        proposals: vec![Proposal {
            request_id: uuid::Uuid::from_u128(2),
            at: 0,
            command: bad,
        }],
    };
    assert!(grants.check(&batch, &Registry::new()).is_err());
}

fn config(toml: &str, credentials_file: Option<&Path>, data_dir: &Path) -> (Grants, Vec<String>) {
    #[derive(serde::Deserialize)]
    struct Tables {
        #[serde(default)]
        credential: Vec<CredentialConfig>,
        #[serde(default)]
        builtins: Vec<String>,
    }
    let tables: Tables = toml::from_str(toml).unwrap();
    let mut problems = Vec::new();
    let grants = grants_from_config(
        &tables.credential,
        credentials_file,
        &tables.builtins,
        data_dir,
        &mut problems,
    );
    (grants, problems)
}

#[test]
fn credentials_come_from_the_configuration_and_its_credentials_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("credentials.toml");
    std::fs::write(
        &file,
        "[[credential]]\nname = \"search\"\nfile = \"/etc/gatehouse/search.key\"\ntenants = [\"*\"]\n",
    )
    .unwrap();
    let (grants, problems) = config(
        "builtins = [\"demo:echo\", \"lab:*\"]\n\n[[credential]]\nname = \"stripe\"\n\
         env = \"STRIPE_KEY\"\ntenants = [\"acme\"]\n",
        Some(&file),
        &data,
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        grants.credentials().keys().collect::<Vec<_>>(),
        ["search", "stripe"]
    );
    assert!(grants.credential_for(None, "search").is_some());
    assert!(grants.builtin_enabled("demo", BuiltinTool::Echo));
    assert!(!grants.builtin_enabled("demo", BuiltinTool::Transfer));
    assert!(
        BuiltinTool::ALL
            .iter()
            .all(|t| grants.builtin_enabled("lab", *t))
    );
    assert_eq!(grants.guarded_dir(), Some(data.as_path()));
}

#[test]
fn every_problem_with_the_credentials_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (_, problems) = config(
        &format!(
            "builtins = [\"demo\", \"demo:shell\", \"Demo:echo\"]\n\n\
             [[credential]]\nname = \"peer\"\nfile = {:?}\ntenants = [\"acme\"]\n\n\
             [[credential]]\nname = \"sneaky\"\nfile = {:?}\ntenants = [\"acme\"]\n\n\
             [[credential]]\nname = \"both\"\nenv = \"A\"\nfile = \"/etc/b\"\ntenants = [\"acme\"]\n\n\
             [[credential]]\nname = \"Bad Name\"\nenv = \"GATEHOUSE_TOKEN\"\n\n\
             [[credential]]\nname = \"peer\"\nenv = \"B\"\ntenants = [\"not a tenant\"]\n",
            data.join("cluster.key").display().to_string(),
            dir.path()
                .join("elsewhere/../data/admin.key")
                .display()
                .to_string(),
        ),
        Some(&dir.path().join("missing.toml")),
        &data,
    );
    for expected in [
        "credentials-file: reading",
        "credential[0].file:",
        "is inside data-dir",
        "credential[1].file:",
        "credential[2]: give exactly one of env and file",
        "credential[3].name: \"Bad Name\"",
        "credential[3].env: GATEHOUSE_TOKEN is one of the node's own settings",
        "credential[3].tenants: name the tenants",
        "credential[4].tenants: \"not a tenant\"",
        "builtins: \"demo\" is not TENANT:TOOL",
        "builtins: \"demo:shell\" names no built-in tool",
        "builtins: \"Demo:echo\" names no tenant",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
    assert_eq!(problems.len(), 11, "{problems:?}");
}

#[test]
fn a_name_given_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (grants, problems) = config(
        "[[credential]]\nname = \"a\"\nenv = \"A\"\ntenants = [\"acme\"]\n\n\
         [[credential]]\nname = \"a\"\nenv = \"B\"\ntenants = [\"acme\"]\n",
        None,
        dir.path(),
    );
    assert_eq!(problems, ["credential[1].name: \"a\" is declared twice"]);
    assert_eq!(
        grants.credential_for(Some("acme"), "a"),
        Some(&CredentialSource::Env("A".into()))
    );
}

#[cfg(unix)]
#[test]
fn a_link_into_the_data_directory_is_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("cluster.key"), "peer_x").unwrap();
    let link = dir.path().join("innocent.key");
    std::os::unix::fs::symlink(data.join("cluster.key"), &link).unwrap();
    assert!(inside(&link, &data));
    assert!(inside(&data.join("not-yet"), &data));
    assert!(!inside(&dir.path().join("other.key"), &data));
    assert!(!inside(&dir.path().join("data-2/key"), &data));
}
