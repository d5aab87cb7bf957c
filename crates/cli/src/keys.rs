//! Single-key commands for live views (`tcptail top`): the terminal on stdin goes to
//! non-canonical, no-echo mode so a key acts without Enter, and is restored when the view
//! ends, including by Ctrl-C.
//!
//! Ctrl-C is read as a key (ISIG off), as full-screen tools do, rather than left to the
//! terminal driver: a SIGINT from the terminal goes to the whole foreground process group,
//! and a non-interactive `sh -c 'tcptail top; next'` (dash) dies of it before `next` runs.
//! A SIGINT sent with `kill` still quits through the same path.

use std::io::{IsTerminal, Read};
use std::sync::mpsc::Sender;

use rustix::termios::{LocalModes, OptionalActions, Termios, tcgetattr, tcsetattr};

/// The key a Ctrl-C (typed, or SIGINT sent from elsewhere) turns into.
pub const QUIT: char = 'q';

/// What the terminal delivers for Ctrl-C and `Ctrl-\` once ISIG is off.
const INTERRUPT_BYTES: [u8; 2] = [0x03, 0x1c];

/// Keys typed on the terminal, while this lives.
pub struct Keys {
    saved: Option<Termios>,
}

impl Keys {
    /// Sends every key typed on stdin to `tx` (and [`QUIT`] on Ctrl-C). Without a terminal on
    /// stdin nothing is read and nothing changes.
    pub fn start(tx: Sender<char>) -> std::io::Result<Keys> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(Keys { saved: None });
        }
        let saved = tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.local_modes -= LocalModes::ICANON | LocalModes::ECHO | LocalModes::ISIG;
        tcsetattr(&stdin, OptionalActions::Now, &raw)?;
        let keys = Keys { saved: Some(saved) };
        let on_signal = tx.clone();
        // A SIGINT from outside the terminal quits through the loop too, so Drop restores.
        ctrlc::set_handler(move || {
            let _ = on_signal.send(QUIT);
        })
        .map_err(std::io::Error::other)?;
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            while std::io::stdin().lock().read(&mut byte).is_ok_and(|n| n == 1) {
                let key =
                    if INTERRUPT_BYTES.contains(&byte[0]) { QUIT } else { char::from(byte[0]) };
                if tx.send(key).is_err() {
                    break;
                }
            }
        });
        Ok(keys)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, saved);
        }
    }
}
