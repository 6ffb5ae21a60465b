//! A throwaway PKI for the TLS tests, made with openssl(1).

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().expect("openssl (apt install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all from the CA;
/// and a second, unrelated CA.
pub fn make_certs(dir: &Path) {
    for (key, cert, name) in [("ca.key", "ca.crt", "test-ca"), ("other.key", "other-ca.crt", "other-ca")] {
        let subject = format!("/CN={name}");
        openssl(
            dir,
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                "-subj", &subject,
            ],
        );
    }
    std::fs::write(dir.join("san.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    for name in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                "san.cnf",
            ],
        );
    }
}

/// The options of a `redis-server` that also listens with TLS on `tls_port`, with the server
/// certificate of [`make_certs`] in `dir`; clients need a certificate when `client_auth`.
pub fn server_args(dir: &Path, tls_port: u16, client_auth: bool) -> Vec<String> {
    let path = |f: &str| dir.join(f).display().to_string();
    [
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        path("server.crt"),
        "--tls-key-file".to_owned(),
        path("server.key"),
        "--tls-ca-cert-file".to_owned(),
        path("ca.crt"),
        "--tls-auth-clients".to_owned(),
        (if client_auth { "yes" } else { "no" }).to_owned(),
    ]
    .into()
}

/// Whether the server under test speaks TLS: Valkey builds may have it as a module they lack
/// ("Failed finding TLS support"). Tests of TLS are skipped, saying so, where it does not.
pub fn server_has_tls() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // Either fails at once: one with TLS on the certificate files, one without on TLS
        // (Valkey says so on stdout, Redis 6.2 does not know the directive, on stderr).
        let Ok(out) = std::process::Command::new(super::server_binary())
            .args([
                "--port",
                "0",
                "--tls-port",
                &super::free_port().to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--tls-cert-file", "/nonexistent", "--tls-key-file", "/nonexistent"])
            .stdin(std::process::Stdio::null())
            .output()
        else {
            return false;
        };
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        !said.contains("Failed finding TLS support") && !said.contains("Bad directive")
    })
}
