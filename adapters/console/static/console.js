// devs console. The pages work without this script; with it:
// - the inbox follows the log over Server-Sent Events (GET /console/live) and
//   fetches its items again (GET /console/inbox?after=N and the page's
//   filters) when the log grows. Items are replaced one by one, by
//   data-task-id; an item holding the keyboard focus or a half-typed answer
//   is left as it is until it is sent. New items are marked "new", the count
//   is in the tab's title, and (opt-in) the browser notifies of new stops;
// - "waiting" and deadlines tick each second;
// - every <time datetime> is written in the reader's local time (its title
//   keeps the UTC time);
// - after an answer, or a refused one, the keyboard focus goes to what the
//   page says ([data-focus]).
"use strict";

// Times: the reader's local time; UTC stays in the title.
var devsLocalTimes = function (root) {
  function two(n) {
    return (n < 10 ? "0" : "") + n;
  }
  var zone = "";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (ignored) {
    zone = "";
  }
  var nodes = (root || document).querySelectorAll("time[datetime]");
  Array.prototype.forEach.call(nodes, function (node) {
    var at = new Date(node.getAttribute("datetime"));
    if (isNaN(at.getTime())) {
      return;
    }
    var offset = -at.getTimezoneOffset();
    var sign = offset >= 0 ? "+" : "-";
    offset = Math.abs(offset);
    node.textContent =
      at.getFullYear() +
      "-" +
      two(at.getMonth() + 1) +
      "-" +
      two(at.getDate()) +
      " " +
      two(at.getHours()) +
      ":" +
      two(at.getMinutes()) +
      ":" +
      two(at.getSeconds()) +
      " " +
      (zone || "UTC" + sign + two(Math.floor(offset / 60)) + ":" + two(offset % 60));
    node.setAttribute("data-local", "true");
  });
};

var devsDrawn = function (node) {
  return node.outerHTML.replace(
    /(data-(?:since|deadline)="[^"]*"[^>]*>)[^<]*/g,
    "$1",
  );
};

(function () {
  var inbox = document.getElementById("inbox");
  if (inbox) {
    // What the server drew, to tell later which items it draws differently.
    Array.prototype.forEach.call(inbox.children, function (node) {
      node.devsHtml = devsDrawn(node);
    });
  }
  devsLocalTimes(document);
  var focus = document.querySelector("[data-focus]");
  if (focus) {
    focus.focus();
  }
})();

// The live inbox.
(function () {
  var inbox = document.getElementById("inbox");
  var state = document.getElementById("live-state");
  var count = document.getElementById("inbox-count");
  var notify = document.getElementById("notify");
  if (!inbox || !window.EventSource || !window.fetch) {
    return;
  }
  var fragment = inbox.getAttribute("data-fragment");
  var live = inbox.getAttribute("data-live");
  var query = inbox.getAttribute("data-query") || "";
  var position = inbox.getAttribute("data-position") || "0";
  var wanted = null;
  var busy = false;

  function notifying() {
    return (
      window.Notification &&
      window.Notification.permission === "granted" &&
      window.localStorage &&
      window.localStorage.getItem("devs-notify") === "on"
    );
  }

  if (notify && window.Notification) {
    notify.hidden = false;
    var label = function () {
      notify.textContent = notifying()
        ? "Stop notifying me of new stops"
        : "Notify me of new stops";
    };
    label();
    notify.addEventListener("click", function () {
      if (notifying()) {
        window.localStorage.setItem("devs-notify", "off");
        label();
        return;
      }
      window.Notification.requestPermission().then(function (answer) {
        if (answer === "granted") {
          window.localStorage.setItem("devs-notify", "on");
        }
        label();
      });
    });
  }

  function keyOf(node) {
    return node.getAttribute("data-task-id") || "#" + node.className;
  }

  function drawn(node) {
    // The HTML the server sent for a node (before this script changed it),
    // less the figures that tick: an item is drawn again only for news.
    if (node.devsHtml === undefined) {
      node.devsHtml = devsDrawn(node);
    }
    return node.devsHtml;
  }

  function edited(node) {
    if (node.contains(document.activeElement)) {
      return true;
    }
    var fields = node.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value !== fields[i].defaultValue) {
        return true;
      }
    }
    var choices = node.querySelectorAll("input[type=radio]");
    for (var j = 0; j < choices.length; j += 1) {
      if (choices[j].checked !== choices[j].defaultChecked) {
        return true;
      }
    }
    return false;
  }

  function marked(node) {
    node.classList.add("fresh");
    var link = node.querySelector("a");
    if (link && !node.querySelector(".badge")) {
      var badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = "new";
      link.parentNode.insertBefore(badge, link.nextSibling);
    }
  }

  function apply(html) {
    var holder = document.createElement(inbox.tagName);
    holder.innerHTML = html;
    var fresh = Array.prototype.slice.call(holder.children);
    var old = {};
    Array.prototype.forEach.call(inbox.children, function (node) {
      drawn(node);
      old[keyOf(node)] = node;
    });
    var keep = {};
    var before = null;
    var added = [];
    for (var i = fresh.length - 1; i >= 0; i -= 1) {
      var node = fresh[i];
      var key = keyOf(node);
      var current = old[key];
      drawn(node);
      keep[key] = true;
      if (current && (current.devsHtml === node.devsHtml || edited(current))) {
        node = current;
      } else if (current && current.classList.contains("fresh")) {
        marked(node);
      }
      if (!current && node.getAttribute("data-task-id")) {
        added.push(node);
        marked(node);
      }
      if (node !== current && current) {
        inbox.replaceChild(node, current);
      }
      if (node !== current) {
        devsLocalTimes(node);
      }
      inbox.insertBefore(node, before);
      before = node;
    }
    Object.keys(old).forEach(function (key) {
      if (!keep[key] && old[key].parentNode === inbox) {
        inbox.removeChild(old[key]);
      }
    });
    if (notifying()) {
      added.forEach(function (node) {
        var task = node.getAttribute("data-task-id");
        new window.Notification(task + " needs a person", {
          body: node.getAttribute("data-why") || "",
          tag: "devs-" + task,
        });
      });
    }
    devsTick();
  }

  function counted(total) {
    if (total === null || !/^[0-9]+$/.test(total)) {
      return;
    }
    document.title = document.title.replace(/^\([0-9]+\) /, "(" + total + ") ");
    if (count) {
      count.textContent = "(" + total + " waiting)";
    }
  }

  function refresh() {
    if (busy || wanted === null) {
      return;
    }
    busy = true;
    var after = wanted;
    wanted = null;
    var total = null;
    fetch(
      fragment + "?after=" + encodeURIComponent(after) + (query ? "&" + query : ""),
      { credentials: "same-origin", headers: { Accept: "text/html" } },
    )
      .then(function (answer) {
        if (answer.status === 401) {
          window.location.reload();
          return null;
        }
        total = answer.headers.get("X-Inbox-Total");
        return answer.ok ? answer.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          apply(html);
          counted(total);
          inbox.setAttribute("data-position", after);
        }
      })
      .catch(function () {
        wanted = wanted === null ? after : wanted;
      })
      .then(function () {
        busy = false;
        if (wanted !== null) {
          refresh();
        }
      });
  }

  var source = new EventSource(live + "?after=" + encodeURIComponent(position));
  source.addEventListener("log", function (message) {
    wanted = message.data;
    refresh();
  });
  source.addEventListener("open", function () {
    inbox.setAttribute("data-live-open", "true");
    if (state && state.textContent.indexOf("Live.") < 0) {
      state.textContent = state.textContent + " Live.";
    }
  });
  source.addEventListener("error", function () {
    inbox.setAttribute("data-live-open", "false");
  });
})();

// Waiting and deadlines: each ticks every second from its data-since or
// data-deadline (an ISO time); the page's own text is the same figure as
// of when it was drawn.
var devsTick = function () {
  function span(seconds) {
    if (seconds < 60) {
      return seconds + " s";
    }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min";
    }
    if (seconds < 86400) {
      return (
        Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min"
      );
    }
    return (
      Math.floor(seconds / 86400) + " d " + Math.floor((seconds % 86400) / 3600) + " h"
    );
  }

  function left(seconds) {
    if (seconds <= 0) {
      return "passed: handing off";
    }
    if (seconds >= 60 && seconds < 3600) {
      return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s left";
    }
    return span(seconds) + " left";
  }

  var now = Date.now();
  Array.prototype.forEach.call(
    document.querySelectorAll("[data-deadline]"),
    function (node) {
      var at = Date.parse(node.getAttribute("data-deadline"));
      if (!isNaN(at)) {
        node.textContent = left(Math.floor((at - now) / 1000));
      }
    },
  );
  Array.prototype.forEach.call(document.querySelectorAll("[data-since]"), function (node) {
    var at = Date.parse(node.getAttribute("data-since"));
    if (!isNaN(at)) {
      node.textContent = span(Math.max(0, Math.floor((now - at) / 1000)));
    }
  });
};

(function () {
  devsTick();
  window.setInterval(devsTick, 1000);
})();
