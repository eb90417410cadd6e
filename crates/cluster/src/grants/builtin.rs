//! The tools the gateway itself provides, by name: what an operator enables per tenant.

/// One built-in tool, by the name a Tool gives after its upstream's (`demo.transfer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BuiltinTool {
    Echo,
    Sleep,
    Fail,
    Transfer,
}

impl BuiltinTool {
    pub const ALL: [BuiltinTool; 4] = [
        BuiltinTool::Echo,
        BuiltinTool::Sleep,
        BuiltinTool::Fail,
        BuiltinTool::Transfer,
    ];

    pub fn parse(name: &str) -> Option<BuiltinTool> {
        BuiltinTool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::Echo => "echo",
            BuiltinTool::Sleep => "sleep",
            BuiltinTool::Fail => "fail",
            BuiltinTool::Transfer => "transfer",
        }
    }
}

impl std::fmt::Display for BuiltinTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
