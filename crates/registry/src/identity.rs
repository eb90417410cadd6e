//! Who a caller is as a person. Principals are credentials (an API key, a JWT issuer's subjects);
//! people are what approvals, self-approval and per-user data are about. Every principal, JWT
//! subject and A2A peer resolves to a person here and nowhere else:
//!
//! | principal | person |
//! |---|---|
//! | bound to a user (`spec.user`), whatever it signs in with | that user |
//! | declared for one JWT subject | that subject |
//! | an issuer's `subject: "*"` principal, with a token | the token's `sub` |
//! | any other (a bare API key, an A2A peer, a `*` principal without a token) | its own name |
//!
//! What the operator declared (a bound user, an exact subject) wins over what a token says, so
//! a token can never make a principal someone else.
//!
//! Names and users share one namespace on purpose: a principal named `dana` and the end user
//! `dana` are the same person, so a collision can only make the gateway refuse more (one
//! approval where two were counted, a self-approval refused), never less.

use crate::resource::PrincipalSpec;

/// The person `principal` (with spec `spec`) is, when it authenticated with a token naming
/// `token_subject` (a verified JWT's `sub`; `None` for an API key, or when no token is at hand).
pub fn person(principal: &str, spec: &PrincipalSpec, token_subject: Option<&str>) -> String {
    if let Some(user) = &spec.user {
        return user.clone();
    }
    match (&spec.jwt, token_subject) {
        (Some(jwt), _) if jwt.subject != "*" => jwt.subject.clone(),
        (Some(_), Some(subject)) => subject.to_owned(),
        _ => principal.to_owned(),
    }
}

/// What per-user data (a call, a task, an idempotency key) is scoped by within a tenant: the
/// principal that made it and the end user it acted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    pub principal: &'a str,
    pub end_user: Option<&'a str>,
}

impl Owner<'_> {
    /// The idempotency record's slot for this owner: the principal alone when it acts for no end
    /// user, else the principal and the user joined by a character no principal name holds.
    pub fn slot(&self) -> String {
        match self.end_user {
            None => self.principal.to_owned(),
            Some(user) => format!("{}\u{1f}{user}", self.principal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::JwtSubject;

    fn key_principal(user: Option<&str>) -> PrincipalSpec {
        PrincipalSpec {
            api_key_sha256: Some("0".repeat(64)),
            user: user.map(str::to_owned),
            ..PrincipalSpec::default()
        }
    }

    fn jwt_principal(subject: &str) -> PrincipalSpec {
        PrincipalSpec {
            jwt: Some(JwtSubject {
                issuer: "https://idp".into(),
                subject: subject.into(),
            }),
            ..PrincipalSpec::default()
        }
    }

    #[test]
    fn a_token_names_the_person_of_an_issuer_wide_principal_only() {
        assert_eq!(person("users", &jwt_principal("*"), Some("bob")), "bob");
        assert_eq!(
            person("dana-sso", &jwt_principal("dana"), Some("bob")),
            "dana"
        );
        assert_eq!(
            person("dana-key", &key_principal(Some("dana")), Some("bob")),
            "dana"
        );
        assert_eq!(person("ci", &key_principal(None), Some("bob")), "ci");
    }

    #[test]
    fn a_key_bound_to_a_user_is_that_user_and_a_bare_key_is_its_name() {
        assert_eq!(
            person("alice-laptop", &key_principal(Some("alice")), None),
            "alice"
        );
        assert_eq!(
            person("alice-ci", &key_principal(Some("alice")), None),
            "alice"
        );
        assert_eq!(person("dana", &key_principal(None), None), "dana");
    }

    #[test]
    fn an_exact_subject_principal_is_its_subject_and_an_issuer_wide_one_its_name() {
        assert_eq!(person("dana-sso", &jwt_principal("dana"), None), "dana");
        assert_eq!(person("users", &jwt_principal("*"), None), "users");
    }

    #[test]
    fn owner_slots_of_different_users_differ_and_cannot_be_forged_by_a_name() {
        let alice = Owner {
            principal: "users",
            end_user: Some("alice"),
        };
        let bob = Owner {
            principal: "users",
            end_user: Some("bob"),
        };
        let bare = Owner {
            principal: "users",
            end_user: None,
        };
        assert_ne!(alice.slot(), bob.slot());
        assert_ne!(alice.slot(), bare.slot());
        assert_eq!(bare.slot(), "users");
    }
}
