//! The Agent Card. The public one (`/.well-known/agent-card.json`) says what the gateway is, where
//! its two interfaces are (`a2a-public-url` and `a2a-grpc-url` when configured, else the Host the
//! peer used and the node's gRPC address), what it can do and how to authenticate, and lists no tenant's tools;
//! the extended one (`GetExtendedAgentCard`, authenticated) lists, as skills, the tools the
//! caller's tenant lets it call.

use super::Front;
use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill,
    HttpAuthSecurityScheme, SecurityScheme, TRANSPORT_PROTOCOL_GRPC, TRANSPORT_PROTOCOL_JSONRPC,
};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use gatehouse_gateway::auth::Caller;
use gatehouse_gateway::executor::a2a::{DATA_ARGUMENTS, DATA_TOOL};
use gatehouse_registry::resource::ToolSpec;
use std::collections::HashMap;
use std::sync::Arc;

const SCHEME: &str = "bearer";

/// The generic skill of the public card: the shape of every task, naming no tool.
const CALL_SKILL: &str = "gatehouse.call";

impl Front {
    /// The public card, with the JSON-RPC URL on the host the peer reached.
    pub(super) fn public_card(&self, host: Option<&str>) -> AgentCard {
        let scheme = if self.settings.https { "https" } else { "http" };
        let base = match (&self.settings.public_url, host) {
            (Some(url), _) => url.clone(),
            (None, Some(host)) => format!("{scheme}://{host}"),
            (None, None) => format!("{scheme}://{}", self.settings.http_addr),
        };
        AgentCard {
            name: "Gatehouse".to_owned(),
            description: format!(
                "A governed gateway to its tenants' tools. A task names one tool and its \
                 arguments as a data part {{\"{DATA_TOOL}\": \"upstream.tool\", \
                 \"{DATA_ARGUMENTS}\": {{...}}}}; calls that need a person wait in \
                 TASK_STATE_AUTH_REQUIRED until the tenant's approvers act. The extended card \
                 lists the tools your tenant lets you call."
            ),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            supported_interfaces: vec![
                AgentInterface::new(format!("{base}{}", super::PATH), TRANSPORT_PROTOCOL_JSONRPC),
                AgentInterface::new(self.settings.grpc_url.clone(), TRANSPORT_PROTOCOL_GRPC),
            ],
            capabilities: AgentCapabilities {
                streaming: Some(true),
                push_notifications: Some(false),
                extensions: None,
                extended_agent_card: Some(true),
            },
            default_input_modes: vec!["application/json".to_owned()],
            default_output_modes: vec!["application/json".to_owned(), "text/plain".to_owned()],
            skills: vec![AgentSkill {
                id: CALL_SKILL.to_owned(),
                name: "Call a tool".to_owned(),
                description: "Runs one tool of your tenant under its policy, with approval \
                              where the policy needs it, exactly once, audited."
                    .to_owned(),
                tags: vec!["tools".to_owned(), "governed".to_owned()],
                examples: Some(vec![format!(
                    "{{\"{DATA_TOOL}\": \"<upstream>.<tool>\", \"{DATA_ARGUMENTS}\": {{...}}}}"
                )]),
                input_modes: Some(vec!["application/json".to_owned()]),
                output_modes: None,
                security_requirements: None,
            }],
            provider: Some(AgentProvider {
                organization: "Gatehouse".to_owned(),
                url: base.clone(),
            }),
            documentation_url: None,
            icon_url: None,
            security_schemes: Some(HashMap::from([(
                SCHEME.to_owned(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "Bearer".to_owned(),
                    description: Some(
                        "A Gatehouse API key, or a JWT of an issuer the gateway trusts; a JWT \
                         whose act claim names the peer acts for its sub"
                            .to_owned(),
                    ),
                    bearer_format: Some("API key or JWT".to_owned()),
                }),
            )])),
            security_requirements: Some(vec![HashMap::from([(SCHEME.to_owned(), Vec::new())])]),
            signatures: None,
        }
    }

    /// The card for an authenticated caller of `tenant`: the public one, with the tools it may
    /// call as skills.
    pub(super) fn extended_card(&self, caller: &Caller, tenant: &str) -> AgentCard {
        let mut card = self.public_card(None);
        card.skills.extend(
            self.pipeline
                .visible_tools(caller, tenant)
                .into_iter()
                .map(|(name, spec)| skill_of(&name, &spec)),
        );
        card
    }
}

fn skill_of(name: &str, spec: &ToolSpec) -> AgentSkill {
    let title = spec
        .annotations
        .as_ref()
        .and_then(|a| a.title.clone())
        .unwrap_or_else(|| name.to_owned());
    let mut tags = vec![name.split_once('.').map_or(name, |(u, _)| u).to_owned()];
    if let Some(toolset) = &spec.toolset {
        tags.push(toolset.clone());
    }
    if let Some(mode) = spec.approval_mode {
        tags.push(mode.as_str().to_owned());
    }
    AgentSkill {
        id: name.to_owned(),
        name: title,
        description: format!(
            "{} Send a data part {{\"{DATA_TOOL}\": \"{name}\", \"{DATA_ARGUMENTS}\": ...}} whose \
             arguments match: {}",
            spec.description.trim(),
            spec.input_schema
        )
        .trim_start()
        .to_owned(),
        tags,
        examples: None,
        input_modes: Some(vec!["application/json".to_owned()]),
        output_modes: Some(vec!["application/json".to_owned()]),
        security_requirements: None,
    }
}

/// `GET /.well-known/agent-card.json`: public, cacheable, readable from any origin.
pub(super) async fn serve_public(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    // The Host a peer reached is reflected into the card only when it looks like one.
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        });
    let card = front.public_card(host);
    (
        [
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        axum::Json(card),
    )
        .into_response()
}
