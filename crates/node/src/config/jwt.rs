//! JWT settings: the file's `[[jwt]]` tables, one trusted issuer each. What one table holds, and
//! what each of its fields must be, is `gatehouse_gateway::auth::JwtIssuerConfig`'s to say; here
//! the issuers are checked together.

use super::problems::Checked;
use gatehouse_gateway::auth::JwtIssuerConfig;

/// The trusted issuers, each one checked, and none configured twice.
pub(super) fn jwt_issuers(issuers: Vec<JwtIssuerConfig>) -> Checked<Vec<JwtIssuerConfig>> {
    let mut problems = Vec::new();
    for (i, issuer) in issuers.iter().enumerate() {
        problems.extend(issuer.problems(i));
        if issuers[..i]
            .iter()
            .any(|earlier| earlier.issuer == issuer.issuer)
        {
            problems.push(format!(
                "jwt[{i}].issuer: {:?} is configured twice",
                issuer.issuer
            ));
        }
    }
    Checked::with(issuers, problems)
}
