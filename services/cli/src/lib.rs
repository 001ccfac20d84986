//! The `mneme` command line.
//!
//! Layout:
//! - [`Cli`]: the commands (`up`, `migrate`, `tenants`, `keys`, `users`, `admins`, `config`, `tools`, …).
//! - [`up`]: every service in one process, for a single machine.
//! - [`admin`]: tenant, key and user management against the database.
//! - [`login`]: OAuth sign-in of the command line, stored tokens, refresh.
//! - [`hook`]: Claude Code's PostToolUse hook (surfaced memories), fail-open.
//! - [`upstreams`]: a tenant's upstream MCP servers and their surfacing switch.
//! - [`proxy`]: `mneme proxy`, the local MCP proxy on stdio (stdio and HTTP upstreams).
//!
//! Commands print results for humans on stdout and diagnostics on stderr;
//! `keys create` prints the new key as the last line of stdout so scripts
//! can capture it with `tail -n1`.
#![forbid(unsafe_code)]

pub mod admin;
pub mod hook;
pub mod login;
pub mod proxy;
pub mod up;
pub mod upstreams;

use clap::{Parser, Subcommand};
use mneme_config::Config;

#[derive(Debug, Parser)]
#[command(name = "mneme", version, about = "Long-term memory for AI agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway, recall, remember, the embedding worker and the
    /// consolidation schedule in one process.
    Up,
    /// Apply pending database migrations (uses MNEME_MIGRATE_DATABASE_URL).
    Migrate,
    /// Manage tenants.
    #[command(subcommand)]
    Tenants(TenantsCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Sign in to a mneme with OAuth (a browser page) and keep the tokens
    /// in the user's configuration directory.
    Login {
        /// The MCP endpoint; defaults to this configuration's.
        url: Option<String>,
        /// Print a valid access token (refreshing the stored one if needed)
        /// instead of signing in.
        #[arg(long)]
        print_token: bool,
    },
    /// Claude Code PostToolUse hook: reads the hook input on stdin and
    /// prints the memories relevant to the tool call as
    /// `hookSpecificOutput.additionalContext` (or `{}`). Never fails.
    Hook {
        /// The host whose hook format is used.
        #[arg(long, default_value = "claude")]
        host: String,
    },
    /// The local MCP proxy: serve MCP on stdio to a desktop client, with
    /// the long-term memory's tools and those of the upstream servers in
    /// the configuration file, and surfaced memories in their results.
    Proxy {
        #[command(subcommand)]
        command: Option<ProxyCommand>,
        /// The configuration file (default: $MNEME_PROXY_CONFIG, else
        /// proxy.json in the user's mneme configuration directory).
        #[arg(long, global = true)]
        config: Option<std::path::PathBuf>,
    },
    /// Manage the people of a tenant (they sign in to approve connectors
    /// and to the admin dashboard).
    #[command(subcommand)]
    Users(UsersCommand),
    /// Manage the platform admins: the operators who sign in to the admin
    /// dashboard and act in every tenant.
    #[command(subcommand)]
    Admins(AdminsCommand),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Describe the MCP tools.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Manage the embedding queue.
    #[command(subcommand)]
    Embeddings(EmbeddingsCommand),
    /// Manage a tenant's upstream MCP servers (reached through mneme's
    /// proxy as `prefix__tool`).
    #[command(subcommand)]
    Upstreams(UpstreamsCommand),
    /// Show or switch surfacing on one upstream of a tenant.
    Surfacing {
        /// The upstream's name.
        server: String,
        /// `on` or `off`; without it, show the current state.
        state: Option<String>,
        #[arg(long)]
        tenant: String,
    },
    /// Run the consolidation stages now, printing each stage's result.
    Consolidate {
        /// Only this tenant (by name); default: every active tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Report what each stage would change, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Clone, Copy, Subcommand)]
pub enum ProxyCommand {
    /// Check the configuration file: print every problem with its JSON
    /// path (exit code 1), or `ok` and a summary.
    Validate,
}

impl ProxyCommand {
    /// What `mneme proxy [COMMAND]` does.
    pub fn action(command: Option<Self>) -> proxy::Action {
        match command {
            None => proxy::Action::Serve,
            Some(Self::Validate) => proxy::Action::Validate,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum UpstreamsCommand {
    /// Register an upstream MCP server for a tenant.
    Add {
        #[arg(long)]
        tenant: String,
        /// 1-63 lowercase letters, digits, `-` or `_`.
        #[arg(long)]
        name: String,
        /// The server's MCP endpoint (https; http and private addresses
        /// only with MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS).
        #[arg(long)]
        url: String,
        /// Prefix of its tools (`prefix__tool`); defaults to the name.
        #[arg(long)]
        prefix: Option<String>,
        /// `streamable_http` or `sse` (the legacy HTTP+SSE transport).
        #[arg(long, default_value = "streamable_http")]
        transport: String,
        /// A header sent to the server, `Name: value` (repeatable); stored
        /// encrypted with MNEME_PROXY_HEADER_KEY.
        #[arg(long)]
        header: Vec<String>,
        /// `none`, `truncate` or `progressive` (default: MNEME_PROXY_COMPRESSION).
        #[arg(long)]
        compression: Option<String>,
        /// Character budget of a result (default: MNEME_PROXY_MAX_RESULT_CHARS).
        #[arg(long)]
        max_chars: Option<i32>,
        /// Register with surfacing off.
        #[arg(long)]
        no_surfacing: bool,
    },
    /// List a tenant's upstreams (header names only, never values).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Remove an upstream; its tools disappear from every session.
    Remove {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum EmbeddingsCommand {
    /// Put a tenant's parked fragments (rejected by the embedding provider
    /// too often) back into the queue, e.g. after changing the provider.
    Requeue {
        /// The tenant's name.
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Print the tool reference of docs/TOOLS.md.
    Docs,
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant.
    Create {
        /// 1-63 lowercase letters, digits, `-` or `_`.
        name: String,
    },
    /// List tenants.
    List,
    /// Suspend a tenant: its keys and OAuth tokens stop working at once;
    /// its memories are kept.
    Suspend { name: String },
    /// Lift a suspension.
    Resume { name: String },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key; prints it once, as the last line of stdout.
    Create {
        /// The tenant's name.
        #[arg(long)]
        tenant: String,
        /// A name for the key, unique within the tenant.
        #[arg(long)]
        name: String,
        /// Comma-separated permissions: read, write, admin.
        #[arg(long, default_value = "read,write")]
        permissions: String,
        /// Default workspace of requests made with this key.
        #[arg(long)]
        workspace: Option<String>,
        /// Most valid fragments the key may hold (`unlimited` for no limit);
        /// defaults to MNEME_DEFAULT_FRAGMENT_LIMIT.
        #[arg(long)]
        fragment_limit: Option<String>,
    },
    /// List a tenant's keys (never their secrets).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Revoke a key; requests with it fail from then on.
    Revoke {
        #[arg(long)]
        tenant: String,
        /// The key's id (see `mneme keys list`).
        #[arg(long)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a user. The password is read from the first line of standard
    /// input (at least 12 characters); with `--generate-password`, a random
    /// one is printed once, as the last line of stdout.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        email: String,
        /// owner, admin or member.
        #[arg(long, default_value = "member")]
        role: String,
        #[arg(long)]
        generate_password: bool,
    },
    /// List a tenant's users (never their passwords).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Set a new password for a user who lost theirs (an administrator's
    /// reset). Reads it from standard input, or generates one with
    /// `--generate-password`.
    ResetPassword {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        email: String,
        #[arg(long)]
        generate_password: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminsCommand {
    /// Create a platform admin. The password is read from the first line of
    /// standard input (at least 12 characters); with `--generate-password`,
    /// a random one is printed once, as the last line of stdout.
    Create {
        #[arg(long)]
        email: String,
        #[arg(long)]
        generate_password: bool,
    },
    /// List the platform admins.
    List,
    /// Set a new password for a platform admin.
    ResetPassword {
        #[arg(long)]
        email: String,
        #[arg(long)]
        generate_password: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the environment and print the effective configuration (secrets hidden).
    Check,
    /// Print the settings tables of docs/CONFIG.md.
    Docs,
}

/// Runs one command.
pub async fn execute(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Up => {
            let listeners = up::Listeners::bind(&config).await?;
            mneme_telemetry::metrics::spawn_exporter(config.metrics_addr);
            eprintln!(
                "mneme is starting; MCP endpoint: {}",
                config.gateway.mcp_url()
            );
            up::up(config, listeners, mneme_telemetry::shutdown_signal()).await
        }
        Command::Migrate => admin::migrate(&config).await,
        Command::Embeddings(EmbeddingsCommand::Requeue { tenant }) => {
            admin::requeue_embeddings(&config, &tenant).await
        }
        Command::Consolidate { tenant, dry_run } => {
            admin::consolidate(&config, tenant.as_deref(), dry_run).await
        }
        Command::Tenants(command) => admin::tenants(&config, command).await,
        Command::Upstreams(command) => Box::pin(upstreams::run(&config, command)).await,
        Command::Surfacing {
            server,
            state,
            tenant,
        } => upstreams::surfacing(&config, &tenant, &server, state.as_deref()).await,
        Command::Keys(command) => admin::keys(&config, command).await,
        Command::Users(command) => admin::users(&config, command).await,
        Command::Admins(command) => admin::admins(&config, command).await,
        Command::Login { url, print_token } => {
            let path = login::credentials_path()?;
            if print_token {
                println!("{}", login::bearer(&path).await?);
                return Ok(());
            }
            let url = url.unwrap_or_else(|| config.gateway.mcp_url());
            let credentials = login::login(&url, login::print_and_open()).await?;
            login::save(&credentials, &path)?;
            eprintln!("signed in to {url}; tokens stored in {}", path.display());
            Ok(())
        }
        Command::Hook { host } => {
            println!("{}", hook::run(&host).await);
            Ok(())
        }
        Command::Proxy { command, config } => {
            // Boxed: serving holds the whole proxy in its future.
            Box::pin(proxy::command(ProxyCommand::action(command), config, false)).await
        }
        Command::Config(ConfigCommand::Check) => {
            println!("{config:#?}");
            Ok(())
        }
        Command::Config(ConfigCommand::Docs) => {
            print!("{}", mneme_config::settings_markdown());
            Ok(())
        }
        Command::Tools(ToolsCommand::Docs) => {
            print!("{}", mneme_gateway::tools_markdown());
            Ok(())
        }
    }
}
