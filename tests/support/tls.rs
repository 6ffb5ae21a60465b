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
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other.key",
            "-out",
            "other-ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=other-ca",
        ],
    );
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
