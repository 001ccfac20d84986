//! `mneme`: see [`mneme::Cli`].

use clap::Parser;
use mneme::Cli;
use mneme_config::{Config, ProcessEnv};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The hook fails open: it must answer `{}` even when the rest of the
    // configuration does not parse, so it runs before (and without) it.
    if let mneme::Command::Hook { host } = &cli.command {
        println!("{}", mneme::hook::run(host).await);
        return std::process::ExitCode::SUCCESS;
    }
    // The local proxy runs on a desktop, without the server's settings; it
    // reads its own file and logs to stderr (stdout is its MCP channel).
    if let mneme::Command::Proxy { command, config } = cli.command {
        let action = mneme::ProxyCommand::action(command);
        return match mneme::proxy::command(action, config, true).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let config = match Config::from_env(&ProcessEnv) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::from(2);
        }
    };
    let _telemetry = mneme_telemetry::init(&config.log, "mneme");
    // Boxed: the command's future holds the whole `Config`, too big for the stack frame.
    match Box::pin(mneme::execute(cli.command, config)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
